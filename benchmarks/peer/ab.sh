#!/usr/bin/env bash
# Single-stream speed, moeserve against llama.cpp on the same weights in the same minutes: each round
# reads the memory bandwidth first (the STREAM probe), then runs both engines on the bf16 model and on
# the int8 one (llama.cpp's Q8_0 GGUF against moeserve's --quantization w8a8-all of the bf16 folder).
# Who goes first flips every round, so a neighbour that comes or goes mid-round does not always hit
# the same engine. Rows: llama-bench pp512 / tg$DECODE_TOKENS against `moeserve generate` on a
# 518-token prompt (prefill rate) and a short prompt decoding $DECODE_TOKENS tokens (decode rate).
# Needs build_llamacpp.sh and make_models.sh first. Run from the project root:
#   MOESERVE_BIN=build/src/moeserve/cli/moeserve ROUNDS=3 benchmarks/peer/ab.sh
# WARMUP (default 1): `generate --warmup`, untimed runs of each prompt first, as llama-bench warms up.
# A quick check that everything runs (numbers meaningless):
#   ROUNDS=1 THREADS=1 DECODE_TOKENS=2 LLAMA_REPS=1 LLAMA_PROMPT=16 PROMPT_SENTENCES=1 benchmarks/peer/ab.sh
set -euo pipefail
PEER_DIR=${PEER_DIR:-$HOME/.cache/moeserve-peer}
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
DECODE_TOKENS=${DECODE_TOKENS:-64}
LLAMA_REPS=${LLAMA_REPS:-2}  # llama-bench repetitions per row (it reports their mean)
LLAMA_PROMPT=${LLAMA_PROMPT:-512}            # llama-bench's prefill length
PROMPT_SENTENCES=${PROMPT_SENTENCES:-37}     # moeserve's prefill prompt: 14 tokens per sentence
M=$PEER_DIR/models
HF=$M/qwen3moe-bench-hf
LB=$PEER_DIR/llama.cpp/build/bin/llama-bench
STREAM=${STREAM_BIN:-$PEER_DIR/stream_read}
for f in "$MS" "$LB" "$STREAM" "$HF/model.safetensors" "$M/qwen3moe-bench-bf16.gguf" "$M/qwen3moe-bench-q8_0.gguf"; do
  [ -e "$f" ] || { echo "missing $f: build moeserve, run build_llamacpp.sh and make_models.sh" >&2; exit 1; }
done

# By default 37 copies of a 14-token sentence: the 518-token prompt of the earlier tables, so rows
# compare with them.
SENTENCE="The quick brown fox jumps over the lazy dog near the river bank. "
PREFILL_PROMPT=""
for _ in $(seq "$PROMPT_SENTENCES"); do PREFILL_PROMPT+=$SENTENCE; done
DECODE_PROMPT="The history of the Roman Empire spans many centuries, and"

llama_row() {  # label, gguf: one llama-bench run (JSON lines out), printed as one row
  local out
  out=$("$LB" -m "$2" -t "$THREADS" -p "$LLAMA_PROMPT" -n "$DECODE_TOKENS" -r "$LLAMA_REPS" \
    -o jsonl 2>/dev/null) || { echo "$1: llama-bench failed"; return 0; }
  printf '%s\n' "$out" | /usr/bin/python3 -c '
import json, sys
rate = {}
for r in (json.loads(l) for l in sys.stdin if l.startswith("{")):
    rate["prefill" if r["n_gen"] == 0 else "decode"] = "%.1f (sd %.1f)" % (r["avg_ts"], r["stddev_ts"])
print("%-20s prefill %s: %s tok/s   decode %s: %s tok/s"
      % (sys.argv[1], sys.argv[2], rate.get("prefill", "?"), sys.argv[3], rate.get("decode", "?")))
' "$1" "$LLAMA_PROMPT" "$DECODE_TOKENS"
}

ms_rate() {  # quantization, prompt, max tokens: "P tok/s (N-token prompt)" for 1 token, else "D tok/s"
  local out line
  out=$("$MS" generate --model "$HF" --warmup "${WARMUP:-1}" --quantization "$1" --prompt "$2" --max-tokens "$3" --ignore-eos \
    --threads "$THREADS" --no-progress 2>&1) || { echo "failed: $(printf '%s\n' "$out" | tail -n 1)"; return 0; }
  # the summary goes to stderr right after the generated text, which ends without a newline
  line=$(printf '%s\n' "$out" | grep -m 1 -o 'generate: load .*') || { echo "no summary line"; return 0; }
  if [ "$3" = 1 ]; then
    sed -E 's/.*prompt ([0-9]+) tokens, prefill ([0-9.]+) tok\/s.*/\2 tok\/s (\1-token prompt)/' <<<"$line"
  else
    sed -E 's/.*decode ([0-9.]+) tok\/s.*/\1 tok\/s/' <<<"$line"
  fi
}

ms_row() {  # label, quantization
  printf '%-20s prefill: %s   decode %s: %s\n' "$1" "$(ms_rate "$2" "$PREFILL_PROMPT" 1)" "$DECODE_TOKENS" \
    "$(ms_rate "$2" "$DECODE_PROMPT" "$DECODE_TOKENS")"
}

pair() {  # round, kind (bf16 | int8): both engines, in the round's order
  local gguf=$M/qwen3moe-bench-bf16.gguf quant=none llama_label="llama.cpp BF16" ms_label="moeserve bf16"
  if [ "$2" = int8 ]; then
    gguf=$M/qwen3moe-bench-q8_0.gguf quant=w8a8-all llama_label="llama.cpp Q8_0" ms_label="moeserve w8a8-all"
  fi
  if (( $1 % 2 )); then
    llama_row "$llama_label" "$gguf"; ms_row "$ms_label" "$quant"
  else
    ms_row "$ms_label" "$quant"; llama_row "$llama_label" "$gguf"
  fi
}

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cpus; threads per engine: $THREADS"
flags=$(grep -m 1 -o -wE 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "isa flags: ${flags:-none of avx2/avx512/amx}"
"$MS" env 2>/dev/null | grep -i isa || echo "(moeserve env printed no isa line)"
for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS, load $(cut -d' ' -f1-3 /proc/loadavg)"
  OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=spread "$STREAM"
  pair "$round" bf16
  pair "$round" int8
done
echo "== end, load $(cut -d' ' -f1-3 /proc/loadavg)"
