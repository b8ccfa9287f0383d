#!/usr/bin/env bash
# Two moeserve binaries A/B through `moeserve serve` + `moeserve bench serve` on the peer's bench-size
# Qwen3-MoE (random 128 in / 128 out unless told, --ignore-eos, bf16 KV), alternating A and B ROUNDS times at each
# level of LEVELS ("concurrency:prompts"), so drifts in this shared machine's rate hit both alike.
# What a kernel change does to serving (docs/performance.md, "bf16 GEMV: f32 FMA on widened weights").
# LAYOUT replaces the default "--threads 2" (e.g. "-tp 2 --enable-expert-parallel --threads 1");
# INPUT_LEN / OUTPUT_LEN replace 128 / 128.
#   A_BIN=/tmp/old/moeserve B_BIN=build/src/moeserve/cli/moeserve benchmarks/binary_serve_ab.sh
set -euo pipefail
P=${PEER_DIR:-$HOME/.cache/moeserve-peer}
HF=${MODEL:-$P/models/qwen3moe-bench-hf}
A_BIN=${A_BIN:?set A_BIN and B_BIN to the two moeserve binaries}
B_BIN=${B_BIN:?set A_BIN and B_BIN to the two moeserve binaries}
LEVELS=${LEVELS:-"8:32 1:4"}
ROUNDS=${ROUNDS:-2}
read -r -a LAYOUT <<<"${LAYOUT:---threads 2}"
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-128}
LOGS=$(mktemp -d)
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
run() {  # binary, label, concurrency, prompts
  local port pid
  port=$(free_port)
  setsid "$1" serve --model "$HF" --served-model-name m --host 127.0.0.1 --port "$port" "${LAYOUT[@]}" \
    --kv-cache-dtype bf16 --max-num-seqs 64 --max-model-len $((INPUT_LEN + OUTPUT_LEN + 64)) >"$LOGS/$2-c$3.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do  # up to 120 s
    [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
    kill -0 "$pid" 2>/dev/null || { echo "$2 server exited (log $LOGS/$2-c$3.log)" >&2; exit 1; }
    sleep 0.2
  done
  "$B_BIN" bench serve --base-url "http://127.0.0.1:$port" --model m --tokenizer "$HF" --dataset-name random \
    --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" --num-prompts "$4" --max-concurrency "$3" --ignore-eos --seed 7 \
    --disable-tqdm 2>&1 | awk -v l="$2 c=$3" '/Output token throughput/ {t=$5} /Mean TTFT/ {a=$4} /Mean TPOT/ {b=$4}
      /Failed requests/ {f=$3} END {printf "%-8s output %8s tok/s  TTFT %9s ms  TPOT %8s ms  failed %s\n", l, t, a, b, f}'
  kill -TERM -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
lscpu | grep -E "Model name"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
[ -x "$P/stream_read" ] && OMP_NUM_THREADS=2 OMP_PROC_BIND=spread "$P/stream_read" | tail -1
for level in $LEVELS; do
  for _ in $(seq "$ROUNDS"); do
    run "$A_BIN" A "${level%%:*}" "${level##*:}"
    run "$B_BIN" B "${level%%:*}" "${level##*:}"
  done
done
[ -x "$P/stream_read" ] && OMP_NUM_THREADS=2 OMP_PROC_BIND=spread "$P/stream_read" | tail -1
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
