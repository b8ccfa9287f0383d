#!/usr/bin/env bash
# DeepSeek-V3 at its real dimensions (hidden 7168, 128 heads, MLA ranks 1536/512, 256 experts of
# 2048 top-8 in 8 groups, vocab 129280) but only 1 dense + 1 MoE layer, W8A8 int8 as the published
# W8A8 checkpoints (compressed-tensors; lm_head, embeddings and routers stay bf16): about
# 15 GB on disk, so it fits a 24 GiB machine. Decode time per layer by difference: a 1-layer model
# (the dense layer) and the 2-layer one (dense + MoE) from the same seed, so the MoE layer is
# t(2) - t(1). The dense layer is t(1) minus the lm_head, whose time is its bytes at the rate its
# GEMV reaches alone (linear_bench, same run; else the STREAM read; the printout says which).
# Bytes read per token per layer come from the checkpoint's own tensor sizes (every tensor of the
# layer once, routed experts 8 of 256). Then what
# 61 layers (3 dense + 58 MoE) imply at this machine's rates. Run from the project root:
#   MOESERVE_BIN=build/src/moeserve/cli/moeserve OUT=/tmp/dsv3-real benchmarks/dsv3_real_dims.sh
# Needs ~19 GB of disk under OUT and ~12 min on 2 cores to write the models (kept for a second
# run). ROUNDS (3) alternating decodes of each, medians; the head's time comes from linear_bench's
# GEMV of its shape in the same run (LINEAR_BENCH, default next to the binary's build). See
# docs/performance.md, "DeepSeek-V3 at its real dimensions".
set -euo pipefail
MS=${MOESERVE_BIN:-build/src/moeserve/cli/moeserve}
OUT=${OUT:-/tmp/dsv3-real}
STREAM=${STREAM_BIN:-$HOME/.cache/moeserve-peer/stream_read}
THREADS=${THREADS:-2}
TOKENS=${TOKENS:-32}
REAL=(--set hidden_size=7168 --set intermediate_size=18432 --set moe_intermediate_size=2048
  --set num_attention_heads=128 --set num_key_value_heads=128 --set q_lora_rank=1536 --set kv_lora_rank=512
  --set qk_nope_head_dim=128 --set qk_rope_head_dim=64 --set v_head_dim=128 --set n_routed_experts=256
  --set n_group=8 --set topk_group=4 --set num_experts_per_tok=8 --set n_shared_experts=1
  --set first_k_dense_replace=1 --set vocab_size=129280)
for layers in 1 2; do
  dir=$OUT/L$layers
  [ -f "$dir/config.json" ] || "$MS" make-model --arch deepseek_v3 --size bench --seed 1 --quantization w8a8 \
    --shards $((layers * 8)) --out "$dir" "${REAL[@]}" --set num_hidden_layers=$layers >/dev/null
done
lscpu | grep -E "Model name|^CPU\(s\)"
"$MS" env 2>/dev/null | grep -iE "isa|cpu" || true
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
stream_gbs=""
if [ -x "$STREAM" ]; then
  stream_gbs=$(OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=spread "$STREAM" | tee /dev/stderr | grep -oE "median [0-9.]+" | grep -oE "[0-9.]+" || true)
fi
decode() {  # decode tok/s of model $1 (prompt of 8 tokens, TOKENS tokens)
  "$MS" generate --model "$1" --prompt "The history of the Roman Empire spans" --max-tokens "$TOKENS" --ignore-eos \
    --threads "$THREADS" 2>&1 | grep -o "generate:.*" | sed -E 's/.*decode ([0-9.]+) tok\/s.*/\1/'
}
LINEAR_BENCH=${LINEAR_BENCH:-$(dirname "$MS")/../../../benchmarks/linear_bench}
head_gbs=0  # the bf16 lm_head GEMV alone (m 1, n 129280, k 7168), same run
if [ -x "$LINEAR_BENCH" ]; then
  head_gbs=$("$LINEAR_BENCH" --benchmark_filter='m:1/n:129280/k:7168' --benchmark_min_time=0.5 2>/dev/null |
    grep -oE " GBps=[0-9.]+" | grep -oE "[0-9.]+" | head -1 || echo 0)
fi
t1s=""; t2s=""
for _ in $(seq "${ROUNDS:-3}"); do  # alternating, so drifts in the machine's rate hit both alike
  t1s="$t1s $(decode "$OUT/L1")"; t2s="$t2s $(decode "$OUT/L2")"
done
echo "decode tok/s: L1$t1s, L2$t2s; lm_head GEMV alone ${head_gbs} GB/s"
/usr/bin/python3 - "$OUT/L2" "$t1s" "$t2s" "${stream_gbs:-0}" "${head_gbs:-0}" <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
t1s, t2s = [list(map(float, a.split())) for a in sys.argv[2:4]]
stream, head_gbs = float(sys.argv[4]), float(sys.argv[5])
size = {"I8": 1, "BF16": 2, "F32": 4, "F16": 2}
cfg = json.load(open(os.path.join(d, "config.json")))
per = {"layer0": 0, "layer1": 0, "head": 0}
topk, experts = cfg["num_experts_per_tok"], cfg["n_routed_experts"]
for f in sorted(os.listdir(d)):
    if not f.endswith(".safetensors"):
        continue
    with open(os.path.join(d, f), "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
    for name, t in header.items():
        if name == "__metadata__":
            continue
        nbytes = size[t["dtype"]]
        for s in t["shape"]:
            nbytes *= s
        if name.startswith("model.layers."):
            layer = "layer" + name.split(".")[2]
            if ".mlp.experts." in name:
                nbytes = nbytes * topk / experts  # 8 of 256 routed experts per token
            per[layer] += nbytes
        elif name.startswith("lm_head") or name.startswith("model.norm"):
            per["head"] += nbytes
ms = lambda tok_s: 1000.0 / tok_s
median = lambda v: sorted(v)[len(v) // 2]
l1, l2 = median([ms(t) for t in t1s]), median([ms(t) for t in t2s])
spread = lambda v: (max(ms(t) for t in v) - min(ms(t) for t in v)) / 2
moe_ms = l2 - l1
# The head at the rate its GEMV reaches alone (linear_bench), else at the STREAM read (optimistic).
head_rate, head_src = (head_gbs, "its GEMV alone in linear_bench") if head_gbs > 0 else (stream, "the STREAM read")
head_ms = per["head"] / (head_rate * 1e9) * 1000 if head_rate > 0 else float("nan")
dense_ms = l1 - head_ms
print(f"bytes/token: dense layer {per['layer0'] / 1e6:.1f} MB, MoE layer {per['layer1'] / 1e6:.1f} MB, "
      f"lm_head + norm {per['head'] / 1e6:.1f} MB")
print(f"decode ms/token (median of {len(t1s)}, +- half the range): 1 layer {l1:.2f} +- {spread(t1s):.2f}, "
      f"2 layers {l2:.2f} +- {spread(t2s):.2f} -> MoE layer {moe_ms:.2f} ms ({per['layer1'] / moe_ms / 1e6:.1f} GB/s)")
if head_rate > 0:
    print(f"dense layer + embedding ~{dense_ms:.2f} ms ({per['layer0'] / dense_ms / 1e6:.1f} GB/s), with the head "
          f"at {head_src}, {head_rate:.1f} GB/s: {head_ms:.2f} ms")
    full = 3 * dense_ms + 58 * moe_ms + head_ms
    total = 3 * per["layer0"] + 58 * per["layer1"] + per["head"]
    print(f"61 layers (3 dense + 58 MoE) at these rates: {full:.0f} ms/token = {1000 / full:.2f} tok/s; "
          f"bytes/token {total / 1e9:.1f} GB"
          + (f" -> {stream * 1e9 / total:.2f} tok/s at the STREAM read {stream:.1f} GB/s" if stream > 0 else ""))
EOF
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
