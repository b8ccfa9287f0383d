#!/usr/bin/env bash
# `make run`: serve the demo model (a tiny random-weight Qwen3-MoE made by `moeserve make-model`)
# on 127.0.0.1:$PORT, show one chat request and its answer, then keep serving until Ctrl-C.
# MOESERVE_DEMO_ONCE=1 stops the server after the request (used to check this script).
set -euo pipefail
BIN=${1:?usage: run_demo.sh BUILD/moeserve MODEL_DIR}
MODEL=${2:?usage: run_demo.sh BUILD/moeserve MODEL_DIR}
PORT=${PORT:-8000}

[ -f "$MODEL/config.json" ] || "$BIN" make-model --arch qwen3_moe --size tiny --seed 1 --out "$MODEL"

"$BIN" serve --model "$MODEL" --served-model-name demo --host 127.0.0.1 --port "$PORT" \
  --kv-cache-memory 256M &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT INT TERM

for _ in $(seq 1 120); do  # bounded wait for the model to load
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $server 2>/dev/null || { echo "run: the server exited" >&2; exit 1; }
  sleep 0.5
done

body='{"model": "demo", "messages": [{"role": "user", "content": "Name three MoE models."}], "max_tokens": 24}'
echo
echo "\$ curl http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' -d '$body'"
curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "$body"
echo
echo
echo "(random weights: the text is noise; the API, tokenizer and chat template are real)"
[ "${MOESERVE_DEMO_ONCE:-0}" = 1 ] && exit 0
echo "serving the demo model on http://127.0.0.1:$PORT (Ctrl-C to stop)"
wait $server
