#!/usr/bin/env bash
# Concurrency sweep, moeserve serve vs llama-server side by side on the identical bench-size
# Qwen3-MoE weights of benchmarks/peer (build_llamacpp.sh and make_models.sh first), both driven by
# `moeserve bench serve` (random IN in / OUT out, --ignore-eos), at each level of LEVELS. llama-server
# is restarted per level with that many slots (-np C, C x (IN + OUT + 64) context, continuous
# batching); moeserve serve runs once (bf16 KV cache, --max-num-seqs = the largest level). Prompts
# per level: max(8, 2 x C), capped by MAX_PROMPTS. LLAMA_MAX caps the levels llama-server runs
# (at most 256: llama.cpp v0.5.0 refuses more sequences, "n_seq_max must be <= 256").
# Prints one summary line per (engine, level) and keeps the full result blocks in $LOGS.
#   MOESERVE_BIN=build/src/moeserve/cli/moeserve LEVELS="1 8 32 128" benchmarks/concurrency_sweep.sh
set -euo pipefail
P=${PEER_DIR:-$HOME/.cache/moeserve-peer}
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
HF=$P/models/qwen3moe-bench-hf
GGUF=$P/models/qwen3moe-bench-bf16.gguf
LS=$P/llama.cpp/build/bin/llama-server
LEVELS=${LEVELS:-"1 8 32 128"}
IN=${IN:-128}
OUT=${OUT:-128}
MAX_PROMPTS=${MAX_PROMPTS:-1024}
LLAMA_MAX=${LLAMA_MAX:-256}
[ "$LLAMA_MAX" -gt 256 ] && LLAMA_MAX=256
THREADS=${THREADS:-2}
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
max_level=0; for c in $LEVELS; do [ "$c" -gt "$max_level" ] && max_level=$c; done

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_health() {  # port, pid: up to 300 s
  for _ in $(seq 3000); do
    [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ] && return
    kill -0 "$2" 2>/dev/null || { echo "server $2 exited" >&2; exit 1; }
    sleep 0.1
  done
  echo "server on $1 not healthy" >&2; exit 1
}
bench() {  # port, concurrency, label
  local n=$(( $2 * 2 > 8 ? $2 * 2 : 8 )); [ $n -gt "$MAX_PROMPTS" ] && n=$MAX_PROMPTS
  local log="$LOGS/$3-c$2.txt"
  "$MS" bench serve --base-url "http://127.0.0.1:$1" --model m --tokenizer "$HF" --dataset-name random \
    --random-input-len "$IN" --random-output-len "$OUT" --num-prompts "$n" --max-concurrency "$2" --ignore-eos \
    --seed 7 --disable-tqdm >"$log" 2>&1
  awk -v who="$3" -v c="$2" -v n="$n" -v load="$(cut -d' ' -f1 /proc/loadavg)" '
    /Successful requests:/ {ok=$3} /Failed requests:/ {bad=$3} /Output token throughput/ {tput=$5}
    /Mean TTFT/ {ttft=$4} /Mean TPOT/ {tpot=$4}
    END {printf "%-13s c=%-5d prompts %-5d ok %-5s failed %-3s output %8s tok/s  TTFT %10s ms  TPOT %8s ms  (load %s)\n",
         who, c, n, ok, bad, tput, ttft, tpot, load}' "$log"
}

lscpu | grep -E "Model name|^CPU\(s\)"
"$MS" env 2>/dev/null | grep -iE "isa" || true
[ -x "$P/stream_read" ] && OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=spread "$P/stream_read"
echo "random $IN in / $OUT out; logs in $LOGS"

port=$(free_port)
setsid "$MS" serve --model "$HF" --served-model-name m --host 127.0.0.1 --port "$port" --threads "$THREADS" \
  --kv-cache-dtype bf16 --max-num-seqs "$max_level" --max-model-len $((IN + OUT + 64)) \
  --max-connections $((max_level * 2 + 64)) >"$LOGS/moeserve.log" 2>&1 &
pids+=($!); MP=$!
wait_health "$port" "$MP"
for c in $LEVELS; do bench "$port" "$c" moeserve; done
kill -TERM -- "-$MP" 2>/dev/null || true; wait "$MP" 2>/dev/null || true

for c in $LEVELS; do
  if [ "$c" -gt "$LLAMA_MAX" ]; then echo "llama-server  c=$c skipped (LLAMA_MAX=$LLAMA_MAX)"; continue; fi
  lport=$(free_port)
  setsid "$LS" -m "$GGUF" --host 127.0.0.1 --port "$lport" -t "$THREADS" -np "$c" -cb -c $((c * (IN + OUT + 64))) \
    --alias m >"$LOGS/llama-server-c$c.log" 2>&1 &
  LP=$!; pids+=($LP)
  wait_health "$lport" "$LP"
  bench "$lport" "$c" llama-server
  kill -TERM -- "-$LP" 2>/dev/null || true; wait "$LP" 2>/dev/null || true
done
echo "end, load $(cut -d' ' -f1-3 /proc/loadavg)"
