#!/usr/bin/env bash
# The TTFT gain of streaming the KV while the prefill runs (docs/performance.md, "PD: the KV
# streamed while the prefill runs"). One prefill and one decode instance (one thread each, the
# machine's two cores), two `moeserve proxy` fronts over them: (s) --kv-streaming true, the decode
# half starts when the prefill instance names the transfer and its fetch follows the prefill
# chunk by chunk; (n) --kv-streaming false, the fetch starts after the prefill has answered. The
# fronts alternate s n, then n s, for ROUNDS rounds, with the STREAM read (benchmarks/stream_read.c,
# 2 threads) before each; every run prints vLLM's result block and `bench serve`'s PD TTFT
# breakdown, headed by a line to grep:
#   === round R, (x) ..., random IN in / OUT out, N prompts, concurrency C, stream read ...
#   MOESERVE_BIN=B MODEL=M [IN=4096] [OUT=16] [PROMPTS=6] [CONCURRENCY=1] [ROUNDS=2] [CHUNK=512] \
#     benchmarks/pd_stream_ab.sh
set -euo pipefail
B=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
M=${MODEL:?the bench model directory (moeserve make-model --arch qwen3_moe --size bench)}
IN=${IN:-4096}
OUT=${OUT:-16}
PROMPTS=${PROMPTS:-6}
CONCURRENCY=${CONCURRENCY:-1}
ROUNDS=${ROUNDS:-2}
CHUNK=${CHUNK:-512}
# Prefix caching off: each front gets the same prompts, and neither may find the other's KV cached.
COMMON=(--threads 1 --max-model-len $((IN + OUT + 64)) --kv-cache-memory 2G --max-num-seqs 8 --served-model-name bench
  --no-enable-prefix-caching)
source "$(dirname "$0")/pd_common.sh"

name=prefill; start serve --model "$M" --port 0 "${COMMON[@]}" --max-num-batched-tokens "$CHUNK" \
  --kv-transfer-config "$(kv kv_producer)"; P=$PORT
name=decode; start serve --model "$M" --port 0 "${COMMON[@]}" --kv-transfer-config "$(kv kv_consumer)"; D=$PORT
healthy "$P"; healthy "$D"
name=streamed; start proxy --port 0 --prefill "http://127.0.0.1:$P" --decode "http://127.0.0.1:$D"; S=$PORT
name=after; start proxy --port 0 --kv-streaming false --prefill "http://127.0.0.1:$P" --decode "http://127.0.0.1:$D"
N=$PORT
healthy "$S"; healthy "$N"

run() {  # port, label
  stream_read="$(stream_read)"
  echo "=== round $round, $2, random $IN in / $OUT out, $PROMPTS prompts, concurrency $CONCURRENCY, $stream_read"
  "$B" bench serve --base-url "http://127.0.0.1:$1" --model bench --tokenizer "$M" --dataset-name random \
    --random-input-len "$IN" --random-output-len "$OUT" --num-prompts "$PROMPTS" --seed "$round" \
    --max-concurrency "$CONCURRENCY" --ignore-eos --disable-tqdm \
    --pd-prefill-url "http://127.0.0.1:$P" --pd-decode-url "http://127.0.0.1:$D"
}

for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then
    run "$S" "(s) KV streamed during the prefill"; run "$N" "(n) KV fetched after the prefill"
  else
    run "$N" "(n) KV fetched after the prefill"; run "$S" "(s) KV streamed during the prefill"
  fi
done
