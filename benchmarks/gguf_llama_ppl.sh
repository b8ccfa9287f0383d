#!/usr/bin/env bash
# moeserve against llama.cpp on the same GGUF files, for correctness (issue #27): llama-perplexity and
# `moeserve perplexity` on the same text, same chunks, f32 KV caches, so the two numbers should agree
# to float rounding when the files are F32 (no activation quantization on either side). Makes a tiny
# random DeepSeek-V3 (deepseek2) and Qwen3-MoE (qwen3moe) F32 GGUF with moeserve's writer, and
# llama-quantize's Q4_K_M of each (which both engines then run; quantized activations make their
# perplexities differ by a few percent on these random models). Run from the project root:
#   benchmarks/gguf_llama_ppl.sh LLAMA_BIN_DIR [TEXT]
# LLAMA_BIN_DIR holds llama-perplexity and llama-quantize. MOESERVE_BIN overrides the binary.
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
L=$1
TEXT=${2:-tests/data/perplexity/kjv_test.txt}
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$MS" make-model --arch deepseek_v3 --size tiny --seed 11 --format gguf --gguf-type F32 --out "$W/dsv3" >/dev/null
"$MS" make-model --arch qwen3_moe --size tiny --seed 7 --set mlp_only_layers=[] --format gguf --gguf-type F32 \
  --out "$W/qwen3" >/dev/null
for f in "$W/dsv3/model-F32.gguf" "$W/qwen3/model-F32.gguf"; do
  "$L/llama-quantize" "$f" "${f%-F32.gguf}-Q4_K_M.gguf" Q4_K_M >/dev/null 2>&1
  for g in "$f" "${f%-F32.gguf}-Q4_K_M.gguf"; do
    name="$(basename "$(dirname "$g")")/$(basename "$g")"
    lp=$("$L/llama-perplexity" -m "$g" -f "$TEXT" -c 64 --chunks 4 -t 2 -ctk f32 -ctv f32 2>&1 |
      grep -o "\[4\][0-9.]*" | tr -d '[]' | sed 's/^4//')
    mp=$("$MS" perplexity --model "$g" -f "$TEXT" -c 64 --chunks 4 --threads 2 --kv-cache-dtype fp32 2>&1 |
      grep -o "PPL = [0-9.]*" | cut -d' ' -f3)
    echo "$name: llama.cpp PPL $lp, moeserve PPL $mp"
  done
done
