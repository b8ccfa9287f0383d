#!/usr/bin/env bash
# `make run`: serve the demo model (models/qwen3-moe-kjv, a small Qwen3-MoE trained on the King
# James Bible by tools/train) on 127.0.0.1:$PORT, show a completion and a chat request with their
# answers, then keep serving until Ctrl-C.
# MOESERVE_DEMO_ONCE=1 stops the server after the request (used to check this script).
set -euo pipefail
BIN=${1:?usage: run_demo.sh BUILD/moeserve MODEL_DIR}
MODEL=${2:?usage: run_demo.sh BUILD/moeserve MODEL_DIR}
PORT=${PORT:-8000}

[ -f "$MODEL/config.json" ] || { echo "run: $MODEL has no config.json" >&2; exit 1; }

"$BIN" serve --model "$MODEL" --served-model-name demo --host 127.0.0.1 --port "$PORT" \
  --kv-cache-memory 256M &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT INT TERM

for _ in $(seq 1 120); do  # bounded wait for the model to load
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $server 2>/dev/null || { echo "run: the server exited" >&2; exit 1; }
  sleep 0.5
done

show() {  # route, JSON body: prints the curl line and the answer
  echo
  echo "\$ curl http://127.0.0.1:$PORT/v1/$1 -H 'Content-Type: application/json' -d '$2'"
  curl -sf "http://127.0.0.1:$PORT/v1/$1" -H 'Content-Type: application/json' -d "$2"
  echo
}
show completions '{"model": "demo", "prompt": "The LORD is my shepherd", "max_tokens": 32, "temperature": 0}'
show chat/completions '{"model": "demo", "messages": [{"role": "user", "content": "What does Psalms 23 say?"}], "max_tokens": 48, "temperature": 0}'
echo
echo "(a 2.8M-parameter Qwen3-MoE trained on the King James Bible in 18 minutes on one CPU core: tools/train)"
[ "${MOESERVE_DEMO_ONCE:-0}" = 1 ] && exit 0
echo "serving the demo model on http://127.0.0.1:$PORT (Ctrl-C to stop)"
wait $server
