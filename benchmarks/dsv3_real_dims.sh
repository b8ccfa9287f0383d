#!/usr/bin/env bash
# DeepSeek-V3 at its real dimensions (hidden 7168, 128 heads, MLA ranks 1536/512, 256 experts of
# 2048 top-8 in 8 groups, vocab 129280) but only 1 dense + 1 MoE layer, W8A8 int8 as the published
# W8A8 checkpoints (compressed-tensors; lm_head, embeddings and routers stay bf16): about
# 15 GB on disk, so it fits a 24 GiB machine. Decode time per layer by difference: a 1-layer model
# (the dense layer) and the 2-layer one (dense + MoE) from the same seed, so the MoE layer is
# t(2) - t(1). The dense layer is t(1) minus the lm_head, which is estimated at the same run's STREAM
# read (its bytes / the rate; the printout says so). Bytes read per token per layer come from the
# checkpoint's own tensor sizes (every tensor of the layer once, routed experts 8 of 256). Then what
# 61 layers (3 dense + 58 MoE) imply at this machine's rates. Run from the project root:
#   MOESERVE_BIN=build/src/moeserve/cli/moeserve OUT=/tmp/dsv3-real benchmarks/dsv3_real_dims.sh
# Needs ~19 GB of disk under OUT and ~12 min on 2 cores to write the models (kept for a second
# run). Its first run gave L1 slower than L2, so the differences are not valid yet: see
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
t1=$(decode "$OUT/L1"); t2=$(decode "$OUT/L2"); t1b=$(decode "$OUT/L1"); t2b=$(decode "$OUT/L2")
echo "decode tok/s: L1 $t1 $t1b, L2 $t2 $t2b"
/usr/bin/python3 - "$OUT/L2" "$t1" "$t1b" "$t2" "$t2b" "${stream_gbs:-0}" <<'EOF'
import json, os, struct, sys
d, t1, t1b, t2, t2b, stream = sys.argv[1], *map(float, sys.argv[2:7])
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
l1, l2 = min(ms(t1), ms(t1b)), min(ms(t2), ms(t2b))  # best of two: noise only adds time
moe_ms = l2 - l1
head_ms = per["head"] / (stream * 1e9) * 1000 if stream > 0 else float("nan")
dense_ms = l1 - head_ms
print(f"bytes/token: dense layer {per['layer0'] / 1e6:.1f} MB, MoE layer {per['layer1'] / 1e6:.1f} MB, "
      f"lm_head + norm {per['head'] / 1e6:.1f} MB")
print(f"decode ms/token: 1 layer {l1:.2f}, 2 layers {l2:.2f} -> MoE layer {moe_ms:.2f} ms "
      f"({per['layer1'] / moe_ms / 1e6:.1f} GB/s)")
if stream > 0:
    print(f"dense layer + embedding ~{dense_ms:.2f} ms ({per['layer0'] / dense_ms / 1e6:.1f} GB/s), with the head "
          f"estimated at the STREAM read {stream:.1f} GB/s: {head_ms:.2f} ms")
    full = 3 * dense_ms + 58 * moe_ms + head_ms
    print(f"61 layers (3 dense + 58 MoE) at these rates: {full:.0f} ms/token = {1000 / full:.2f} tok/s; "
          f"bytes/token {(3 * per['layer0'] + 58 * per['layer1'] + per['head']) / 1e9:.1f} GB "
          f"-> {1000 / ((3 * per['layer0'] + 58 * per['layer1'] + per['head']) / (stream * 1e9) * 1000):.2f} tok/s "
          f"at the STREAM read")
EOF
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
