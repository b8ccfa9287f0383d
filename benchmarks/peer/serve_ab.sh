#!/usr/bin/env bash
# Serving side by side: llama-server and `moeserve serve` on the same weights, one after the other in
# each round, both driven by the same client (`moeserve bench serve`, random IN-token prompts, OUT
# tokens each with --ignore-eos, at most CONCURRENCY in flight). llama-server gets CONCURRENCY slots
# with continuous batching and room for every slot's whole sequence; moeserve gets the same number of
# sequences. The first argument picks the weights: bf16 (bf16 GGUF / bf16 folder), int8 (Q8_0 GGUF /
# --quantization w8a8-all), or gguf-q4_0 / gguf-q4_k_m / gguf-q8_0 (the same GGUF file in both
# servers; moeserve's resident memory after load is printed next to the file's size). Ports are whatever the kernel hands out free at start, so a run never
# collides with another server on the machine. Needs build_llamacpp.sh and make_models.sh first.
# Run from the project root:
#   MOESERVE_BIN=build/src/moeserve/cli/moeserve benchmarks/peer/serve_ab.sh bf16               # c8
#   CONCURRENCY=32 PROMPTS=64 MOESERVE_BIN=build/src/moeserve/cli/moeserve benchmarks/peer/serve_ab.sh bf16
#   LLAMA_BUILD=build-avx2 MOESERVE_ISA=avx2 benchmarks/peer/serve_ab.sh gguf-q4_k_m    # both at AVX2
set -euo pipefail
KIND=${1:-bf16}
PEER_DIR=${PEER_DIR:-$HOME/.cache/moeserve-peer}
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
CONCURRENCY=${CONCURRENCY:-8}
PROMPTS=${PROMPTS:-$((CONCURRENCY * 4))}
IN=${IN:-128}
OUT=${OUT:-128}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-2}
STARTUP_S=${STARTUP_S:-300}  # the longest a server may take to answer /health
M=$PEER_DIR/models
HF=$M/qwen3moe-bench-hf
# LLAMA_BUILD=build-avx2 (build_llamacpp.sh with LLAMA_ISA=avx2) with MOESERVE_ISA=avx2: both at AVX2
LS=$PEER_DIR/llama.cpp/${LLAMA_BUILD:-build}/bin/llama-server
MS_MODEL=$HF
case "$KIND" in
  bf16) GGUF=$M/qwen3moe-bench-bf16.gguf; QUANT=none ;;
  int8) GGUF=$M/qwen3moe-bench-q8_0.gguf; QUANT=w8a8-all ;;
  gguf-*) GGUF=$M/qwen3moe-bench-${KIND#gguf-}.gguf; MS_MODEL=$GGUF; QUANT="" ;;
  *) echo "usage: $0 [bf16|int8|gguf-q4_0|gguf-q4_k_m|gguf-q8_0]" >&2; exit 2 ;;
esac
for f in "$MS" "$LS" "$HF/model.safetensors" "$GGUF"; do
  [ -e "$f" ] || { echo "missing $f: build moeserve, run build_llamacpp.sh and make_models.sh" >&2; exit 1; }
done
LOGS=$PEER_DIR/results/serve-$KIND-c$CONCURRENCY-$(date +%Y%m%d-%H%M%S)
mkdir -p "$LOGS"

server=""  # the process group of the server now running, so an interrupted run leaves none behind
stop_server() {
  [ -n "$server" ] || return 0
  kill -TERM -- "-$server" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
}
trap stop_server EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ready() {  # port: polls /health until 200, the server dies, or STARTUP_S passes
  local deadline=$((SECONDS + STARTUP_S))
  while ((SECONDS < deadline)); do
    [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ] && return 0
    kill -0 "$server" 2>/dev/null || { echo "server exited before it was ready" >&2; return 1; }
    sleep 0.5
  done
  echo "server on port $1 not ready after ${STARTUP_S}s" >&2
  return 1
}

measure() {  # label, port, seed: one client run, summarized on one line; the full report is kept
  local log
  log=$LOGS/$(tr ' ' _ <<<"$1")-seed$3.txt
  "$MS" bench serve --base-url "http://127.0.0.1:$2" --model m --tokenizer "$HF" --dataset-name random \
    --random-input-len "$IN" --random-output-len "$OUT" --num-prompts "$PROMPTS" --max-concurrency "$CONCURRENCY" \
    --ignore-eos --seed "$3" --disable-tqdm >"$log" 2>&1 || echo "$1: bench serve failed, see $log"
  awk -v who="$1" '
    /^Successful requests:/ { ok = $NF }            /^Failed requests:/ { failed = $NF }
    /^Output token throughput/ { out = $NF }        /^Mean TTFT/ { ttft = $NF }
    /^Mean TPOT/ { tpot = $NF }                     /^Benchmark duration/ { dur = $NF }
    END { printf "%-24s ok %s failed %s  output %s tok/s  mean TTFT %s ms  mean TPOT %s ms  (%s s)\n",
          who, ok, (failed == "" ? 0 : failed), out, ttft, tpot, dur }' "$log"
}

run_llama() {  # round
  local port
  port=$(free_port)
  setsid "$LS" -m "$GGUF" --host 127.0.0.1 --port "$port" -t "$THREADS" -np "$CONCURRENCY" -cb \
    -c $((CONCURRENCY * (IN + OUT + 64))) --alias m >"$LOGS/llama-server-round$1.log" 2>&1 &
  server=$!
  wait_ready "$port"
  measure "llama-server $KIND" "$port" "$1"
  stop_server
}

run_moeserve() {  # round
  local port
  port=$(free_port)
  setsid "$MS" serve --model "$MS_MODEL" --served-model-name m --host 127.0.0.1 --port "$port" --threads "$THREADS" \
    ${QUANT:+--quantization "$QUANT"} --max-num-seqs "$CONCURRENCY" >"$LOGS/moeserve-round$1.log" 2>&1 &
  server=$!
  wait_ready "$port"
  measure "moeserve ${QUANT:-$KIND}" "$port" "$1"
  if [ -z "$QUANT" ]; then
    echo "  moeserve $(grep -o 'resident [0-9.]* MiB after load' "$LOGS/moeserve-round$1.log" | head -n 1);" \
      "file $(($(stat -c %s "$GGUF") / 1048576)) MiB"
  fi
  stop_server
}

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cpus; threads per server: $THREADS"
echo "random $IN in / $OUT out, $PROMPTS prompts at concurrency $CONCURRENCY; reports in $LOGS"
for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS, load $(cut -d' ' -f1-3 /proc/loadavg)"
  # the same seed (the same prompts) for both engines within a round; who starts flips each round
  if ((round % 2)); then run_llama "$round"; run_moeserve "$round"; else run_moeserve "$round"; run_llama "$round"; fi
done
echo "== end, load $(cut -d' ' -f1-3 /proc/loadavg)"
