#!/usr/bin/env bash
# One checkpoint run at several --quantization choices, alternating within each round. Each row:
# `moeserve generate` decode (64 tokens) and prefill (a 518-token prompt) rates and the process's
# peak resident memory (GNU time), at the CPU's best kernels and at AVX2 (MOESERVE_ISA); each
# round starts with the STREAM read. Run from the project root. The default: DeepSeek's FP8 as
# stored (W8A16) against the same checkpoint widened to bf16 at load (none) and quantized to int8
# (w8a8), on the bench-size DeepSeek-V3 written in FP8 (128 x 128 block scales) by make-model:
#   MOESERVE_BIN=build/src/moeserve/cli/moeserve ROUNDS="1 2 3" benchmarks/quant_ab.sh
# int4 (W4A16, groups of 128) against int8 and bf16 on the bench-size Qwen3-MoE:
#   MODEL=/tmp/qwen3-bench MAKE_ARGS="--arch qwen3_moe --size bench --seed 1" QUANTS="w4a16 w8a8 none" \
#     AVX2_QUANTS="w4a16 w8a8" benchmarks/quant_ab.sh
# STREAM_BIN: stream_read built from benchmarks/stream_read.c (gcc -O3 -mavx2 -fopenmp). WARMUP (default
# 1): `generate --warmup`, untimed runs of each prompt first (0: the cold first forward).
set -euo pipefail
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
MODEL=${MODEL:-/tmp/dsv3-bench-fp8}
STREAM=${STREAM_BIN:-$HOME/.cache/moeserve-peer/stream_read}
MAKE_ARGS=${MAKE_ARGS:---arch deepseek_v3 --size bench --seed 1 --quantization fp8}
# shellcheck disable=SC2086  # MAKE_ARGS is a list of arguments
[ -f "$MODEL/config.json" ] || "$MS" make-model $MAKE_ARGS --out "$MODEL" >/dev/null
P518="$(/usr/bin/python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog near the river bank.']*37))")"
DEC='The history of the Roman Empire spans many centuries, and'
# rates and peak RSS (MiB) of one generate run
ms() {
  local out
  out=$(/usr/bin/time -f "rss_kb %M" "$MS" generate --model "$MODEL" --warmup "${WARMUP:-1}" --quantization "$1" --prompt "$2" \
    --max-tokens "$3" --ignore-eos --threads "${T:-2}" 2>&1)
  echo "$(grep -o "generate:.*" <<<"$out" |
    sed -E 's/.*prefill ([0-9.]+) tok\/s.*decode ([0-9.]+) tok\/s.*/prefill \1 tok\/s, decode \2 tok\/s/'), peak RSS \
$(($(grep -o "rss_kb [0-9]*" <<<"$out" | cut -d' ' -f2) / 1024)) MiB"
}
lscpu | grep -E "Model name|^CPU\(s\)"
"$MS" env | grep -E "isa|cpu" || true
du -sh "$MODEL"
for round in ${ROUNDS:-1 2 3}; do
  echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  [ -x "$STREAM" ] && OMP_NUM_THREADS=2 OMP_PROC_BIND=spread "$STREAM"
  for q in ${QUANTS:-fp8 none w8a8}; do
    echo "$q decode: $(ms $q "$DEC" 64)"
    echo "$q p518:   $(ms $q "$P518" 1)"
  done
  for q in ${AVX2_QUANTS:-fp8 none}; do  # the AVX2 kernels (Zen3's), where the CPU has more
    echo "$q avx2 decode: $(MOESERVE_ISA=avx2 ms $q "$DEC" 64)"
    echo "$q avx2 p518:   $(MOESERVE_ISA=avx2 ms $q "$P518" 1)"
  done
done
echo "== end, load $(cut -d' ' -f1-3 /proc/loadavg)"
