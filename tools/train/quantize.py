"""Writes an 8-bit copy of a trained model directory in a checkpoint format moeserve loads, for the
quality table (quality_table.py):

    /usr/bin/python3 tools/train/quantize.py --model models/qwen3-moe-kjv --format fp8 --out /tmp/q

fp8: DeepSeek's block-scaled F8_E4M3 (`weight_scale_inv` per 128 x 128 block, the scale the power
of two >= absmax / 448, quantization_config quant_method fp8); w8a8: compressed-tensors int8
(per-row `weight_scale` = absmax / 127, round half to even, token-dynamic int8 activations).
The projections of the decoder layers are quantized (q/k/v/o, MLA's q_a/q_b/kv_a/kv_b, the
experts' and dense MLPs' gate/up/down); embeddings, routers, norms, lm_head and the MTP layer
stay as they are, as in the released checkpoints of both formats.
"""

import argparse
import json
import os
import re
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
import safetensors_np  # noqa: E402

FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
W8A8_CONFIG = {
    "quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                              "dynamic": True}}},
    "ignore": ["lm_head", "re:.*mlp\\.gate$"]}


def fp8_blocks(w):
    rows, cols = w.shape
    br, bc = -(-rows // 128), -(-cols // 128)
    scale = np.ones((br, bc), np.float32)
    q = np.zeros_like(w)
    for i in range(br):
        for j in range(bc):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = float(np.abs(blk).max())
            s = 2.0 ** np.ceil(np.log2(amax / 448.0)) if amax > 0 else 1.0
            scale[i, j] = s
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = blk / s
    return q, scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--format", choices=["fp8", "w8a8"], required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    raw, dtypes = safetensors_np.read_safetensors(os.path.join(args.model, "model.safetensors"), with_dtypes=True)
    n = config["num_hidden_layers"]
    target = re.compile(r"model\.layers\.(\d+)\..*_proj\.weight$")
    out = {}
    for name, a in raw.items():
        m = target.match(name)
        if not m or int(m.group(1)) >= n or name.endswith("eh_proj.weight"):
            out[name] = (dtypes[name], a)
        elif args.format == "fp8":
            q, scale = fp8_blocks(np.asarray(a, np.float32))
            out[name], out[name + "_scale_inv"] = ("F8_E4M3", q), ("F32", scale)
        else:
            w = np.asarray(a, np.float64)
            scale = np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-30) / 127.0
            out[name] = ("I8", np.clip(np.rint(w / scale), -127, 127).astype(np.int8))
            out[name + "_scale"] = ("F32", scale.astype(np.float32))
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.model):
        if f not in ("model.safetensors", "config.json"):
            shutil.copy(os.path.join(args.model, f), args.out)
    safetensors_np.write_safetensors(os.path.join(args.out, "model.safetensors"), out, {"format": "pt"})
    config["quantization_config"] = FP8_CONFIG if args.format == "fp8" else W8A8_CONFIG
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
