#!/usr/bin/env bash
# Speculative decoding on and off on the same model, the modes alternating within each round (and
# their order reversed every other round) so that the noise of a shared machine hits all alike
# (issue #30): per round and mode, `moeserve generate --prompt` (concurrency 1: decode tok/s) and
# `moeserve generate --input` with 8 prompts at once (concurrency 8: output tok/s), each printing
# the drafts accepted (per position), the draft budget at the end and the routed expert bytes read
# per token. Run from the project root:
#   benchmarks/spec_decode_ab.sh [MODEL_DIR [LABEL=SPEC ...]]
# MODEL_DIR defaults to models/qwen3-moe-kjv; each LABEL=SPEC is a mode with that
# --speculative-config (default: ngram='{"method": "ngram", "num_speculative_tokens": 4,
# "prompt_lookup_max": 3, "prompt_lookup_min": 1}'); a mode "plain" without speculation always runs.
# Environment: MOESERVE_BIN (default build/src/moeserve/cli/moeserve), ROUNDS (default "1 2 3"),
# THREADS (default 2), MAX_TOKENS (default 256).
set -euo pipefail
MODEL=${1:-models/qwen3-moe-kjv}
shift || true
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
T=${THREADS:-2}
N=${MAX_TOKENS:-256}
declare -A SPECS=()
MODES=(plain)
if [ $# -eq 0 ]; then
  set -- 'ngram={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'
fi
for arg in "$@"; do
  SPECS[${arg%%=*}]=${arg#*=}
  MODES+=("${arg%%=*}")
done
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
echo "# model $MODEL, $N tokens, threads $T"
for m in "${MODES[@]:1}"; do echo "# mode $m: ${SPECS[$m]}"; done
run() {  # mode -> two summary lines
  local extra=()
  [ "$1" != plain ] && extra=(--speculative-config "${SPECS[$1]}")
  "$MS" generate --model "$MODEL" --prompt "${PROMPTS[0]}" --max-tokens "$N" --ignore-eos --threads "$T" \
    "${extra[@]}" 2>&1 >/dev/null | grep '^generate:' | sed "s/^/c=1 $1 /"
  "$MS" generate --model "$MODEL" --input "$WORK/in.jsonl" --output "$WORK/out.jsonl" --max-num-seqs 8 \
    --threads "$T" --no-progress "${extra[@]}" 2>&1 >/dev/null | grep '^generate:' | sed "s/^/c=8 $1 /"
}
for r in ${ROUNDS:-1 2 3}; do
  echo "## round $r: $("${STREAM_BIN:-$HOME/.cache/moeserve-peer/stream_read}" 2>/dev/null | tail -1 || echo "no STREAM read")"
  order=("${MODES[@]}")
  if [ $((r % 2)) -eq 0 ]; then
    order=()
    for ((i = ${#MODES[@]} - 1; i >= 0; i--)); do order+=("${MODES[$i]}"); done
  fi
  for m in "${order[@]}"; do run "$m"; done
done
echo "# uptime at the end:$(uptime | sed 's/.*load/ load/')"
