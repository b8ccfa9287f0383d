#!/usr/bin/env bash
# EPLB on and off (issue #31), dp=DP + EP over the same model with its router skewed onto a few
# experts of EP rank 0 (MOESERVE_DEBUG_ROUTER_SKEW), alternating within each round so the noise of a
# shared machine hits both alike. Per round: the STREAM read (benchmarks/stream_read.c), then per
# mode a fresh `moeserve serve`, a warm-up (for EPLB: until a rebalance has completed), and
# `moeserve bench serve` (random IN in / OUT out, concurrency C): output tok/s, TTFT, TPOT, and the
# imbalance ratio the server reports. Run from the project root on the bench model:
#   moeserve make-model --arch qwen3_moe --size bench --out /tmp/qwen3-bench
#   benchmarks/eplb_ab.sh /tmp/qwen3-bench
# Environment: MOESERVE_BIN (build/src/moeserve/cli/moeserve), ROUNDS ("1 2 3"), DP (2), THREADS
# (threads per rank: 1), C (8), PROMPTS (32), IN (128), OUT (128), SKEW ("0-7:8": the bench model's
# top-8 all land on rank 0), EPLB_CONFIG (window and interval of 128 forwards), IDEAL_SKEW (if set,
# a third mode "ideal": no EPLB, the router skewed onto this many experts spread evenly over the
# ranks by hand, e.g. "0-15,32-47:30" for SKEW "0-31:30": what a perfect placement would give).
set -euo pipefail
MODEL=${1:?model dir}
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
DP=${DP:-2}; T=${THREADS:-1}; C=${C:-8}; N=${PROMPTS:-32}; IN=${IN:-128}; OUT=${OUT:-128}
SKEW=${SKEW:-0-7:8}
EPLB_CONFIG=${EPLB_CONFIG:-'{"window_size": 128, "step_interval": 128}'}
[ -x "$MS" ] || { echo "no moeserve binary at $MS (set MOESERVE_BIN)" >&2; exit 2; }
WORK=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
STREAM="$WORK/stream_read"
gcc -O3 -mavx2 -fopenmp benchmarks/stream_read.c -o "$STREAM"

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metric() {  # port, family -> engine 0's value
  curl -s "http://127.0.0.1:$1/metrics" | awk -v f="$2" 'index($0, f "{") == 1 && /engine="0"/ {print $NF; exit}'
}
serve() {  # mode -> starts the server, sets $port and $pid, waits for /health
  local extra=()
  [ "$1" = eplb ] && extra=(--enable-eplb --eplb-config "$EPLB_CONFIG")
  local skew=$SKEW
  [ "$1" = ideal ] && skew=$IDEAL_SKEW
  port=$(free_port)
  MOESERVE_DEBUG_ROUTER_SKEW="$skew" setsid "$MS" serve --model "$MODEL" --served-model-name m --host 127.0.0.1 \
    --port "$port" --threads "$T" --data-parallel-size "$DP" --enable-expert-parallel --kv-cache-dtype bf16 \
    --max-num-seqs "$C" --max-model-len $((IN + OUT + 64)) "${extra[@]}" >"$WORK/$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 3000); do
    [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && return
    kill -0 "$pid" 2>/dev/null || { tail -5 "$WORK/$1.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "server not healthy" >&2; exit 1
}
bench() {  # mode, prompts -> one line
  "$MS" bench serve --base-url "http://127.0.0.1:$port" --model m --tokenizer "$MODEL" --dataset-name random \
    --random-input-len "$IN" --random-output-len "$OUT" --num-prompts "$2" --max-concurrency "$C" --ignore-eos \
    --seed 7 --disable-tqdm >"$WORK/bench.txt" 2>&1
  awk -v who="$1" -v ratio="$(metric "$port" moeserve:eplb_imbalance_ratio)" '
    /Successful requests:/ {ok=$3} /Output token throughput/ {tput=$5} /Mean TTFT/ {ttft=$4} /Mean TPOT/ {tpot=$4}
    END {printf "%-6s ok %-4s output %8s tok/s  TTFT %9s ms  TPOT %8s ms  max/mean %s\n", who, ok, tput, ttft, tpot,
         ratio == "" ? "-" : ratio}' "$WORK/bench.txt"
}
run() {  # mode
  serve "$1"
  bench "$1-warm" "$C" >/dev/null
  if [ "$1" = eplb ]; then  # bounded: until a move has completed
    for _ in $(seq 20); do
      [ "$(metric "$port" moeserve:eplb_rebalances_total)" != "0" ] && break
      bench warm "$C" >/dev/null
    done
  fi
  bench "$1" "$N"
  kill -TERM -- "-$pid"; wait "$pid" 2>/dev/null || true; pid=""
}
echo "# $(date -u '+%F %T UTC') | $(lscpu | sed -n 's/^Model name: *//p') | $(nproc) CPUs | uptime:$(uptime | sed 's/.*load/ load/')"
echo "# model $MODEL, dp $DP + EP, $T thread(s)/rank, skew $SKEW, random $IN/$OUT, c=$C, $N prompts, eplb $EPLB_CONFIG"
for r in ${ROUNDS:-1 2 3}; do
  echo "## round $r: $(OMP_NUM_THREADS=$((DP * T)) OMP_PROC_BIND=spread "$STREAM" | tail -1)"
  run plain
  run eplb
  [ -n "${IDEAL_SKEW:-}" ] && run ideal
done
