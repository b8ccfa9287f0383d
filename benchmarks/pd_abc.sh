#!/usr/bin/env bash
# The PD-hybrid seed's comparison in miniature (docs/performance.md, "PD hybrid vs disaggregated"):
# the same request load against (a) dp=2 + EP with --pd-hybrid, (b) dp=2 + EP without it, (c) one
# prefill + one decode instance behind `moeserve proxy`. Each deployment gets the machine's two
# cores as two single-threaded engines. The deployments alternate, a b c then c b a, for ROUNDS
# rounds, so a machine whose memory bandwidth drifts (a shared VM) hits each alike; the STREAM read
# (benchmarks/stream_read.c, 2 threads) is printed before each deployment. Prints vLLM's result
# block per (round, deployment, shape), each headed by a line to grep:
#   === round R, (x) deployment, random IN in / OUT out, N prompts, concurrency C, stream read ...
#   MOESERVE_BIN=B MODEL=M [SHAPES="128:1024 1024:1024"] [ROUNDS=2] [PROMPTS=16] [CONCURRENCY=8] \
#     [OUT_CAP=256] benchmarks/pd_abc.sh
# SHAPES are the seed's (in:out); OUT_CAP cuts each output length to what the machine allows in
# reasonable time (the seed's 1024-token outputs at ~40 tok/s take 7 minutes per run here).
set -euo pipefail
B=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
M=${MODEL:?the bench model directory (moeserve make-model --arch qwen3_moe --size bench)}
SHAPES=${SHAPES:-"128:1024 1024:1024"}
ROUNDS=${ROUNDS:-2}
PROMPTS=${PROMPTS:-16}
CONCURRENCY=${CONCURRENCY:-8}
OUT_CAP=${OUT_CAP:-256}
COMMON=(--threads 1 --max-model-len 2560 --kv-cache-memory 2G --max-num-seqs 16 --served-model-name bench)
source "$(dirname "$0")/pd_common.sh"
bench() {  # port, label
  for shape in $SHAPES; do
    in=${shape%%:*} out=${shape##*:}
    [ "$out" -gt "$OUT_CAP" ] && out=$OUT_CAP
    echo "=== round $round, $2, random $in in / $out out, $PROMPTS prompts, concurrency $CONCURRENCY, $stream_read"
    "$B" bench serve --base-url "http://127.0.0.1:$1" --model bench --tokenizer "$M" --dataset-name random \
      --random-input-len "$in" --random-output-len "$out" --num-prompts "$PROMPTS" \
      --max-concurrency "$CONCURRENCY" --ignore-eos --disable-tqdm
  done
}
stop_all() { cleanup; pids=(); }

run() {  # a | b | c
  stream_read="$(stream_read)"
  case $1 in
    a | b)
      name=$1; extra=(); [ "$1" = a ] && extra=(--pd-hybrid)
      start serve --model "$M" --port 0 "${COMMON[@]}" -dp 2 --enable-expert-parallel "${extra[@]}"
      healthy "$PORT"
      bench "$PORT" "$([ "$1" = a ] && echo '(a) dp=2 + EP + PD hybrid' || echo '(b) dp=2 + EP, mixed')"
      stop_all ;;
    c)
      name=prefill; start serve --model "$M" --port 0 "${COMMON[@]}" --kv-transfer-config "$(kv kv_producer)"; P=$PORT
      name=decode; start serve --model "$M" --port 0 "${COMMON[@]}" --kv-transfer-config "$(kv kv_consumer)"; D=$PORT
      healthy "$P"; healthy "$D"
      name=proxy; start proxy --port 0 --prefill "http://127.0.0.1:$P" --decode "http://127.0.0.1:$D"; healthy "$PORT"
      bench "$PORT" "(c) 1 prefill + 1 decode instance"
      curl -s "http://127.0.0.1:$D/metrics" |
        grep -E '^moeserve:kv_(transfer_bytes|transfers|transfer_seconds|wait_seconds)_total' || true
      stop_all ;;
  esac
}

for round in $(seq "$ROUNDS"); do
  order="a b c"; [ $((round % 2)) = 0 ] && order="c b a"
  for d in $order; do run "$d"; done
done
