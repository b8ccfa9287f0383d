"""The quality table of docs/performance.md and docs/quantization.md: `moeserve perplexity` on the
held-out text for each shipped model, in float32 (weights and KV cache: the base) and in each
precision that loads, with the KL divergence of each against the float32 run.

    /usr/bin/python3 tools/train/quality_table.py --moeserve build/src/moeserve/cli/moeserve \
        [--text tests/data/perplexity/kjv_test.txt] [--ctx 512] [--threads 2] [--chunks -1] [--only M]

Prints one markdown table per model; each row's flags are given in full so it can be rerun. The
converted checkpoints are written by tools/train/quantize.py and by `moeserve make-model --from`.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
MODELS = ["qwen3-moe-kjv", "deepseek-v3-kjv"]
BASE = ["--dtype", "float32", "--kv-cache-dtype", "fp32"]
RUNS = [
    ("bf16 weights, bf16 KV (the default)", []),
    ("bf16 weights, f32 KV", ["--kv-cache-dtype", "fp32"]),
    ("bf16 weights, fp8 KV (experimental)", ["--kv-cache-dtype", "fp8"]),
    ("W8A8 at load, bf16 KV", ["--quantization", "w8a8"]),
    ("W8A8 at load (lm_head too), bf16 KV", ["--quantization", "w8a8-all"]),
    ("W8A8 at load, fp8 KV", ["--quantization", "w8a8", "--kv-cache-dtype", "fp8"]),
    ("W4A16 at load (int4, groups of 128), bf16 KV", ["--quantization", "w4a16"]),
]
# Checkpoints written by quantize.py from the shipped model: (row name, --format, run flags).
CONVERTED = [("FP8 block-scaled checkpoint as stored (W8A16; quantize.py), bf16 KV", "fp8", []),
             ("FP8 block-scaled checkpoint widened to bf16 (quantize.py), bf16 KV", "fp8", ["--quantization", "none"]),
             ("compressed-tensors W8A8 checkpoint (quantize.py), bf16 KV", "w8a8", [])]
# Checkpoints written by `moeserve make-model --from` (the Ascend layouts): (row name,
# --quantization, the model_types it is written for).
MADE = [("ModelSlim W8A8 mix (static attention, synthetic calibration; make-model), bf16 KV", "modelslim-w8a8",
         ("qwen3_moe", "deepseek_v3")),
        ("ModelSlim W8A8_DYNAMIC (make-model), bf16 KV", "modelslim-w8a8-dynamic", ("qwen3_moe", "deepseek_v3")),
        ("MindSpore golden-stick A8W8 (static attention, synthetic calibration; make-model), bf16 KV",
         "mindspore-a8w8", ("deepseek_v3",))]
# GGUF files written by `moeserve make-model --from ... --format gguf`: (row name, --gguf-type). The
# K-quants need rows of 256 and these models are 128 wide, so their files would be Q8_0 fallbacks.
GGUF = [("GGUF Q8_0 (make-model --format gguf), bf16 KV", "Q8_0"),
        ("GGUF Q5_0 (make-model --format gguf), bf16 KV", "Q5_0"),
        ("GGUF Q4_0 (make-model --format gguf), bf16 KV", "Q4_0")]


def run(args, model_dir, extra):
    cmd = [args.moeserve, "perplexity", "--model", model_dir, "--file", args.text,
           "--ctx", str(args.ctx), "--chunks", str(args.chunks), "--threads", str(args.threads), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return p.stdout


def field(pattern, text):
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return m.groups()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeserve", required=True)
    ap.add_argument("--text", default=os.path.join(ROOT, "tests", "data", "perplexity", "kjv_test.txt"))
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=MODELS, help="one model only")
    ap.add_argument("--rows", help="only the rows whose name holds this text (the base always runs)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    for model in [args.only] if args.only else MODELS:
        base = os.path.join(tmp, model + ".kld")
        model_dir = os.path.join(ROOT, "models", model)
        out = run(args, model_dir, BASE + ["--kl-divergence-base", base])
        scored, ppl, err = field(r"(\d+) scored: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
        tps = field(r"([0-9.]+) tokens/s", out)[0]
        print(f"\n{model}: {scored} scored tokens, ctx {args.ctx}; the f32 run: {tps} tokens/s\n")
        print("| run | flags | PPL | mean KLD vs f32 | 99% KLD | same top token | RMS delta p |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        print(f"| f32 weights, f32 KV (base) | `{' '.join(BASE)}` | {ppl} +/- {err} | 0 | 0 | 100 % | 0 |")
        wanted = [r[0] for r in RUNS + CONVERTED + MADE + GGUF]
        wanted = {name for name in wanted if not args.rows or args.rows in name}
        runs = [(name, model_dir, flags) for name, flags in RUNS if name in wanted]
        for name, fmt, flags in CONVERTED:
            if name not in wanted:
                continue
            q_dir = os.path.join(tmp, f"{model}-{fmt}")
            if not os.path.isdir(q_dir):
                subprocess.run([sys.executable, os.path.join(HERE, "quantize.py"), "--model", model_dir, "--format",
                                fmt, "--out", q_dir], check=True)
            runs.append((name, q_dir, flags))
        with open(os.path.join(model_dir, "config.json")) as f:
            model_type = json.load(f)["model_type"]
        for name, quant, types in MADE:
            if model_type not in types or name not in wanted:
                continue
            q_dir = os.path.join(tmp, f"{model}-{quant}")
            subprocess.run([args.moeserve, "make-model", "--from", model_dir, "--quantization", quant, "--out", q_dir],
                           check=True, capture_output=True)
            runs.append((name, q_dir, []))
        for name, gguf_type in GGUF:
            if name not in wanted:
                continue
            q_dir = os.path.join(tmp, f"{model}-{gguf_type}")
            subprocess.run([args.moeserve, "make-model", "--from", model_dir, "--format", "gguf", "--gguf-type",
                            gguf_type, "--out", q_dir], check=True, capture_output=True)
            runs.append((name, os.path.join(q_dir, f"model-{gguf_type}.gguf"), []))
        for name, run_dir, flags in runs:
            out = run(args, run_dir, flags + ["--kl-divergence-base", base, "--kl-divergence"])
            ppl, err = field(r"PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
            kld, kld_err, p99 = field(r"mean KLD (\S+) \+/- (\S+)  median \S+  99% (\S+)", out)
            same = field(r"same top token ([0-9.]+) \+/- ([0-9.]+) %", out)
            rms = field(r"RMS ([0-9.]+) %", out)[0]
            print(f"| {name} | `{' '.join(flags) or '(none)'}` | {ppl} +/- {err} | {kld} +/- {kld_err} | {p99} | "
                  f"{same[0]} +/- {same[1]} % | {rms} % |", flush=True)


if __name__ == "__main__":
    main()
