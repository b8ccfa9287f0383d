#!/usr/bin/env bash
# Identical weights for both engines: a random bench-size Qwen3-MoE drawn once as a Hugging Face
# directory (moeserve's input) and written again, from the same bytes, as a BF16 GGUF (llama.cpp's
# input); llama-quantize then makes the Q8_0 / Q4_0 / Q4_K_M files the quantized rows compare against.
# Needs build_llamacpp.sh first (gguf-py and llama-quantize come from that checkout), Debian's numpy in
# /usr/bin/python3, and Qwen3's tokenizer files: TOKENIZER_DIR, a folder with tokenizer.json and
# tokenizer_config.json (for instance ~/.cache/moeserve/tokenizers/qwen3, which `make setup` fills).
# Files already there are kept, so a second run only adds what is missing. Writes ~7 GB under
# $PEER_DIR/models (default ~/.cache/moeserve-peer/models); a few minutes on an idle machine.
#   TOKENIZER_DIR=~/.cache/moeserve/tokenizers/qwen3 benchmarks/peer/make_models.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PEER_DIR=${PEER_DIR:-$HOME/.cache/moeserve-peer}
: "${TOKENIZER_DIR:?set TOKENIZER_DIR to a folder with the Qwen3 tokenizer.json and tokenizer_config.json}"
LLAMA=$PEER_DIR/llama.cpp
QUANTIZE=$LLAMA/build/bin/llama-quantize
[ -x "$QUANTIZE" ] || { echo "no $QUANTIZE: run benchmarks/peer/build_llamacpp.sh first" >&2; exit 1; }
M=$PEER_DIR/models
mkdir -p "$M"

if [ ! -f "$M/qwen3moe-bench-bf16.gguf" ]; then
  PYTHONPATH="$LLAMA/gguf-py" /usr/bin/python3 "$HERE/gen_qwen3moe_random.py" --preset bench \
    --out "$M/qwen3moe-bench-hf" --tokenizer-dir "$TOKENIZER_DIR" --gguf "$M/qwen3moe-bench-bf16.gguf"
fi
for q in Q8_0 Q4_0 Q4_K_M; do
  out="$M/qwen3moe-bench-${q,,}.gguf"
  [ -f "$out" ] && continue
  "$QUANTIZE" "$M/qwen3moe-bench-bf16.gguf" "$out.partial" "$q" >"$out.log" 2>&1 ||
    { echo "llama-quantize $q failed, see $out.log" >&2; exit 1; }
  mv "$out.partial" "$out"
done
du -sh "$M/qwen3moe-bench-hf" "$M"/qwen3moe-bench-*.gguf
