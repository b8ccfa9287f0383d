#!/usr/bin/env bash
# n-gram speculative decoding on and off on the same model, alternating within each round so that
# the noise of a shared machine hits both alike (issue #30): per round and mode, `moeserve generate
# --prompt` (concurrency 1: decode tok/s) and `moeserve generate --input` with 8 prompts at once
# (concurrency 8: output tok/s), each printing the drafts accepted. Run from the project root:
#   benchmarks/spec_decode_ab.sh [MODEL_DIR]     (default models/qwen3-moe-kjv)
# Environment: MOESERVE_BIN (default build/src/moeserve/cli/moeserve), ROUNDS (default "1 2 3"),
# THREADS (default 2), MAX_TOKENS (default 256), SPEC (default k=4, lookup 3..1).
set -euo pipefail
MODEL=${1:-models/qwen3-moe-kjv}
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
T=${THREADS:-2}
N=${MAX_TOKENS:-256}
SPEC=${SPEC:-'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'}
[ -x "$MS" ] || { echo "no moeserve binary at $MS (set MOESERVE_BIN)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PROMPTS=("And God said, Let there be light: and there was light."
  "In the beginning God created the heaven and the earth."
  "The LORD is my shepherd; I shall not want."
  "And the LORD spake unto Moses, saying,"
  "Blessed are the poor in spirit: for theirs is the kingdom of heaven."
  "And it came to pass in those days,"
  "For God so loved the world,"
  "Now the serpent was more subtil than any beast of the field")
for p in "${PROMPTS[@]}"; do
  printf '{"prompt": "%s", "max_tokens": %d, "temperature": 0, "ignore_eos": true}\n' "$p" "$N"
done > "$WORK/in.jsonl"
echo "# $(date -u '+%F %T UTC') | $(lscpu | sed -n 's/^Model name: *//p') | $(nproc) CPUs | uptime:$(uptime | sed 's/.*load/ load/')"
echo "# model $MODEL, $N tokens, threads $T, spec $SPEC"
run() {  # mode (plain|spec) -> two summary lines
  local extra=()
  [ "$1" = spec ] && extra=(--speculative-config "$SPEC")
  "$MS" generate --model "$MODEL" --prompt "${PROMPTS[0]}" --max-tokens "$N" --ignore-eos --threads "$T" \
    "${extra[@]}" 2>&1 >/dev/null | grep '^generate:' | sed "s/^/c=1 $1 /"
  "$MS" generate --model "$MODEL" --input "$WORK/in.jsonl" --output "$WORK/out.jsonl" --max-num-seqs 8 \
    --threads "$T" --no-progress "${extra[@]}" 2>&1 >/dev/null | grep '^generate:' | sed "s/^/c=8 $1 /"
}
for r in ${ROUNDS:-1 2 3}; do
  echo "## round $r"
  run plain
  run spec
done
echo "# uptime at the end:$(uptime | sed 's/.*load/ load/')"
