#!/usr/bin/env bash
# Side by side on one machine, alternating within each round: llama.cpp (native build) vs moeserve at
# each kernel ISA level (MOESERVE_ISA), on the identical bench-size Qwen3-MoE weights of
# benchmarks/peer (build_llamacpp.sh and make_models.sh first). benchmarks/peer/ab.sh plus the moeserve
# rows forced to avx2 (the Zen3 path), both weight walks of the avx512 GEMV and the opt-in
# bf16-rounded prefill. Run from the project root:
#   MOESERVE_BIN=build/src/moeserve/cli/moeserve ROUNDS="1 2 3" benchmarks/isa_ab.sh
# WARMUP (default 1): `generate --warmup`, untimed runs of each prompt first, as llama-bench warms up.
P=${PEER_DIR:-$HOME/.cache/moeserve-peer}
LB=$P/llama.cpp/build/bin/llama-bench
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
HF=$P/models/qwen3moe-bench-hf
STREAM=${STREAM_BIN:-$P/stream_read}
P518="$(/usr/bin/python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog near the river bank.']*37))")"
DEC='The history of the Roman Empire spans many centuries, and'
ms() { "$MS" generate --model "$HF" --warmup "${WARMUP:-1}" --quantization "$1" --prompt "$2" --max-tokens "$3" --ignore-eos --threads "${T:-2}" 2>&1 |
  grep -o "generate:.*" | sed -E 's/.*prefill ([0-9.]+) tok\/s.*decode ([0-9.]+) tok\/s.*/prefill \1 tok\/s, decode \2 tok\/s/'; }
lscpu | grep -E "Model name|^CPU\(s\)"
MOESERVE_ISA=avx512 "$MS" env 2>/dev/null | grep -E "isa|cpu" || "$MS" env
for round in ${ROUNDS:-1 2 3}; do
  echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  OMP_NUM_THREADS=2 OMP_PROC_BIND=spread "$STREAM"
  "$LB" -m "$P/models/qwen3moe-bench-bf16.gguf" -t 2 -p 512 -n 64 -r 2 2>/dev/null | grep qwen3moe | awk -F'|' '{print "llama bf16 pp512/tg64:", $7, $8}'
  for isa in avx512 avx2; do
    echo "ms $isa bf16 decode: $(MOESERVE_ISA=$isa ms none "$DEC" 64)"
    echo "ms $isa bf16 p518:   $(MOESERVE_ISA=$isa ms none "$P518" 1)"
  done
  for rb in 0 1; do  # the avx512 GEMV's two weight walks (isa.h gemv_row_blocks(): 0 on AMD, 1 elsewhere)
    echo "ms avx512 bf16 decode, MOESERVE_GEMV_ROW_BLOCKS=$rb: $(MOESERVE_GEMV_ROW_BLOCKS=$rb MOESERVE_ISA=avx512 ms none "$DEC" 64)"
  done
  echo "ms avx512 bf16 p518 (MOESERVE_BF16_ACTIVATIONS=round): $(MOESERVE_ISA=avx512 MOESERVE_BF16_ACTIVATIONS=round ms none "$P518" 1)"
  # 1 thread each: on a machine busy with other work, 2 spinning threads can collapse (llama.cpp's do).
  "$LB" -m "$P/models/qwen3moe-bench-bf16.gguf" -t 1 -p 0 -n 32 -r 2 2>/dev/null | grep qwen3moe | awk -F'|' '{print "llama bf16 1 thread:", $7, $8}'
  echo "ms avx512 bf16 decode, 1 thread: $(T=1 MOESERVE_ISA=avx512 ms none "$DEC" 32)"
  "$LB" -m "$P/models/qwen3moe-bench-q8_0.gguf" -t 2 -p 512 -n 64 -r 2 2>/dev/null | grep qwen3moe | awk -F'|' '{print "llama q8_0 pp512/tg64:", $7, $8}'
  "$LB" -m "$P/models/qwen3moe-bench-q8_0.gguf" -t 1 -p 0 -n 32 -r 2 2>/dev/null | grep qwen3moe | awk -F'|' '{print "llama q8_0 1 thread:", $7, $8}'
  echo "ms avx512 w8a8-all decode, 1 thread: $(T=1 MOESERVE_ISA=avx512 ms w8a8-all "$DEC" 32)"
  for isa in avx512 avx2; do
    echo "ms $isa w8a8-all decode: $(MOESERVE_ISA=$isa ms w8a8-all "$DEC" 64)"
    echo "ms $isa w8a8-all p518:   $(MOESERVE_ISA=$isa ms w8a8-all "$P518" 1)"
  done
done
echo "== end, load $(cut -d' ' -f1-3 /proc/loadavg)"
