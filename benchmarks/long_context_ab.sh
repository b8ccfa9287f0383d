#!/usr/bin/env bash
# Long prompts, moeserve against llama.cpp on identical weights (issue #29), alternating within each
# round so that the noise of a shared machine hits both alike. Per round: the STREAM-style read
# (stream_read.c, same thread count); llama-bench for prefill at 512 / 4096 / 16384 tokens
# (`-p`), decode at short context (tg64) and decode of 32 tokens after 4096 / 16384 tokens of
# context (`-d`); then `moeserve generate` on prompts of ~512 / ~4096 / ~16384 tokens, whose one
# run gives both the prefill rate at that length and the decode rate at that depth. Run from the
# project root:
#   benchmarks/long_context_ab.sh LLAMA_BIN_DIR MODEL.gguf HF_MODEL_DIR
# MODEL.gguf and HF_MODEL_DIR hold the same weights (benchmarks/peer/make_models.sh writes both).
# Environment: MOESERVE_BIN (default build/src/moeserve/cli/moeserve), ROUNDS (default "1 2"),
# THREADS (default 2), LENGTHS (default "512 4096 16384"), STREAM_BIN (default: stream_read.c
# compiled into $TMPDIR), MOESERVE_ARGS (extra flags for moeserve generate, e.g. --kv-cache-dtype),
# WARMUP (default 1: `generate --warmup`, untimed runs of each prompt first, as llama-bench warms up
# with one; 0 times the process's first, cold forward).
set -euo pipefail
if [ $# -ne 3 ]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
LB=$1/llama-bench
GGUF=$2
HF=$3
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
T=${THREADS:-2}
LENGTHS=${LENGTHS:-512 4096 16384}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$LB" ] || { echo "no llama-bench in $1" >&2; exit 2; }
[ -x "$MS" ] || { echo "no moeserve binary at $MS (set MOESERVE_BIN)" >&2; exit 2; }
STREAM=${STREAM_BIN:-}
if [ -z "$STREAM" ]; then
  STREAM=${TMPDIR:-/tmp}/moeserve_stream_read
  gcc -O3 -mavx2 -fopenmp "$HERE/stream_read.c" -o "$STREAM"
fi

# A prompt of about N tokens for Qwen3's tokenizer (the sentence is 14 tokens); moeserve prints the
# exact count.
prompt_of() { for _ in $(seq $(($1 / 14))); do printf 'The quick brown fox jumps over the lazy dog near the river bank. '; done; }
longest=0
for n in $LENGTHS; do [ "$n" -gt "$longest" ] && longest=$n; done

# moeserve generate: "prompt P tokens, prefill X tok/s | decode Y tok/s"
ms() {
  "$MS" generate --model "$HF" --warmup "${WARMUP:-1}" --prompt "$(prompt_of "$1")" --max-tokens "$2" --ignore-eos --threads "$T" \
    --no-progress --max-model-len $((longest + 256)) ${MOESERVE_ARGS:-} 2>&1 |
    grep -o "generate:.*" | sed -E 's/.*prompt ([0-9]+) tokens, prefill ([0-9.]+) tok\/s.*decode ([0-9.]+) tok\/s.*/prompt \1 tokens, prefill \2 tok\/s | decode \3 tok\/s/'
}
# llama-bench: "pp512 X t/s  tg32@d4096 Y t/s ..." (one repetition each: the long ones take minutes)
lb() {
  "$LB" -m "$GGUF" -t "$T" -r 1 -o csv "$@" 2>/dev/null | tr -d '"' |
    awk -F',' 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
               { p = $col["n_prompt"]; g = $col["n_gen"]; d = ("n_depth" in col) ? $col["n_depth"] : 0;
                 printf "%s%s %.2f t/s  ", (p > 0 ? "pp" p : "tg" g), (d > 0 ? "@d" d : ""), $col["avg_ts"] }
               END { print "" }'
}

lscpu | grep -E "Model name|^CPU\(s\)"
"$MS" env 2>/dev/null | grep -iE "^cpu|isa" || true
echo "threads $T; lengths $LENGTHS; llama.cpp: $LB; moeserve: $MS ${MOESERVE_ARGS:-}"
for round in ${ROUNDS:-1 2}; do
  echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  OMP_NUM_THREADS=$T OMP_PROC_BIND=spread "$STREAM"
  depths=$(for n in $LENGTHS; do [ "$n" -gt 512 ] && printf '%s,' "$n"; done)
  echo "llama.cpp short: $(lb -p 512 -n 64)"
  echo "llama.cpp prefill: $(lb -p "$(echo $LENGTHS | tr ' ' ',')" -n 0)"
  [ -n "$depths" ] && echo "llama.cpp decode at depth: $(lb -p 0 -n 32 -d "${depths%,}")"
  for n in $LENGTHS; do
    gen=32
    [ "$n" -le 512 ] && gen=64
    echo "moeserve ~$n: $(ms "$n" "$gen")"
  done
done
echo "== end, load $(cut -d' ' -f1-3 /proc/loadavg); $(uptime)"
