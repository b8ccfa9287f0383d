# Shared float64 building blocks of the numpy reference models: weights, RMSNorm, SwiGLU,
# RoPE tables (default / linear / YaRN), rotate-half and interleaved RoPE, causal attention,
# stable top-k, and the CLI driver (logits file, greedy decoding, per-layer traces).
"""Pieces shared by qwen3_moe_ref.py and deepseek_v3_ref.py. All math is float64."""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_stick_np  # noqa: E402
import safetensors_np  # noqa: E402


class Weights(dict):
    """{name: float64 ndarray}; integer tensors are kept as they are. act_quant: simulate W8A8's
    dynamic per-token int8 activation quantization at the input of every int8 linear.
    modelslim: {tensor name: type} of an Ascend ModelSlim checkpoint (quant_model_description.json),
    which then decides per linear (FLOAT, W8A8 static, W8A8_DYNAMIC, W4A8_DYNAMIC).
    golden_stick: the static linears of a golden-stick A8W8 checkpoint (converted from MindFormers
    names by golden_stick_np); its MLPs and experts run with per-token dynamic activations."""

    act_quant = False
    gguf_types = None
    modelslim = None
    golden_stick = None


MODELSLIM_META_KEYS = {"model_quant_type", "version", "group_size", "kv_cache_type", "kv_quant_type",
                       "fa_quant_type", "reduce_quant_type", "metadata", "optional"}


def to_bf16(v):
    """float64 value(s) -> the nearest bf16 (through f32, round half to even), as float64."""
    bits = safetensors_np.f32_to_bf16_bits(np.asarray(v, dtype=np.float32))
    return np.asarray(safetensors_np.bf16_bits_to_f32(bits), dtype=np.float64)


def modelslim_deq_scale(d):
    """deq_scale as float64: F32 as is; an integer tensor holds the f32 bit pattern in its low
    32 bits (ModelSlim's int64 form)."""
    d = np.asarray(d)
    if d.dtype.kind in "iu":
        return (d.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    return d.astype(np.float64)


def static_w8a8(weights, prefix, x):
    """ModelSlim static W8A8 as vllm-ascend runs it: m = bf16(1 / bf16(s_x)),
    q = sat8(rint(x * m + z_x)), y = (q @ W_q^T + quant_bias) * deq_scale. A float bias is already
    inside quant_bias."""
    s_x = float(np.asarray(need(weights, prefix + ".input_scale")).reshape(-1)[0])
    z_x = float(np.asarray(need(weights, prefix + ".input_offset")).reshape(-1)[0])
    m = float(to_bf16(np.float32(1.0 / np.float32(to_bf16(s_x)))))
    q = np.clip(np.rint(x * m + z_x), -128, 127)
    w_q = np.asarray(need(weights, prefix + ".weight")).astype(np.float64)
    acc = q @ w_q.T  # exact integers in float64
    bias = np.asarray(need(weights, prefix + ".quant_bias")).astype(np.float64)
    return (acc + bias) * modelslim_deq_scale(need(weights, prefix + ".deq_scale"))


def int8_module(prefix):
    """The linears a W8A8 run keeps in int8 (moeserve's Quantization::int8_module): all but
    lm_head, routers (*.mlp.gate) and MLA's kv_b_proj (absorbed, kept dequantized)."""
    return not (prefix == "lm_head" or prefix.endswith(".mlp.gate") or prefix.endswith("kv_b_proj"))


def quant_dequant_rows(x):
    """Per-row symmetric int8: s = max|row| / 127, q = round-half-even(x * 127 / max|row|),
    returns q * s (an all-zero row stays zero)."""
    amax = np.max(np.abs(x), axis=-1, keepdims=True)
    inv = np.where(amax > 0, 127.0 / np.where(amax > 0, amax, 1.0), 0.0)
    return np.rint(x * inv) * (amax / 127.0)


def q8_0_act(x):
    """llama.cpp's x86 quantize_row_q8_0 round trip on f32 values, per block of 32:
    q = round-half-even(x * (127 / amax)), d = f16(amax / 127); returns q * d."""
    b = np.asarray(x, dtype=np.float32).reshape(x.shape[:-1] + (-1, 32))
    amax = np.max(np.abs(b), axis=-1, keepdims=True)
    inv = np.where(amax != 0, np.float32(127) / np.where(amax != 0, amax, np.float32(1)), np.float32(0))
    q = np.rint(b * inv.astype(np.float32))
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float64)
    return (q.astype(np.float64) * d).reshape(x.shape)


def q8_k_act(x):
    """llama.cpp's quantize_row_q8_K_ref round trip, per block of 256: the element of largest
    magnitude maps to -127 (iscale = -127 / max), q = min(127, nearest(iscale * x)), d = 1 / iscale."""
    b = np.asarray(x, dtype=np.float32).reshape(x.shape[:-1] + (-1, 256))
    idx = np.argmax(np.abs(b), axis=-1)[..., None]
    mx = np.take_along_axis(b, idx, axis=-1)
    nz = mx != 0
    iscale = np.where(nz, np.float32(-127) / np.where(nz, mx, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.minimum(127, np.rint(iscale * b))
    d = np.where(nz, np.float32(1) / np.where(nz, iscale, np.float32(1)), np.float32(0)).astype(np.float32)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)


def gguf_act(weights, name, x):
    """The activations as moeserve's GGUF dot products see them for the weight `name`: q8_0 for
    Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / MXFP4, q8_K for Q2_K to Q6_K, unchanged for the
    types dequantized per row."""
    t = weights.gguf_types.get(name)
    if t in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"):
        return q8_0_act(x)
    if t in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
        return q8_k_act(x)
    return x


def prepare_weights(raw):
    """Converts a {name: ndarray} dict (as load_model_dir returns) to float64 Weights once."""
    if isinstance(raw, Weights):
        return raw
    out = Weights()
    for name, a in raw.items():
        a = np.asarray(a)
        out[name] = a.astype(np.float64) if a.dtype.kind == "f" else a
    return out


def load_model(model_dir):
    """(Weights, config dict) of a HF model directory."""
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    raw = safetensors_np.load_model_dir(model_dir)
    if (config.get("quantization_config") or {}).get("quant_method") == "osl":
        hf, static = golden_stick_np.convert(raw, config)
        weights = prepare_weights(hf)
        weights.golden_stick = static
        return weights, config
    weights = prepare_weights(raw)
    desc_path = os.path.join(model_dir, "quant_model_description.json")
    if os.path.exists(desc_path):
        with open(desc_path) as f:
            desc = json.load(f)
        weights.modelslim = {k: v for k, v in desc.items()
                             if k not in MODELSLIM_META_KEYS and isinstance(v, str)}
    return weights, config


def need(weights, name):
    if name not in weights:
        raise KeyError(f"weight {name} is missing from the checkpoint")
    return weights[name]


def linear(weights, prefix, x):
    """x [n, in] @ W.T (+ bias when the checkpoint has one) -> [n, out]; W is [out, in]."""
    if weights.golden_stick is not None:
        if prefix in weights.golden_stick:
            return golden_stick_np.static_a8w8(weights, prefix, x)
        if ".mlp." in prefix and not prefix.endswith(".mlp.gate"):
            x = quant_dequant_rows(x)
    elif weights.modelslim is not None:
        kind = weights.modelslim[prefix + ".weight"]  # every linear must be described
        absorbed = prefix.endswith("kv_b_proj")  # MLA's kv_b_proj runs dequantized
        if kind == "W8A8" and not absorbed:
            return static_w8a8(weights, prefix, x)
        if kind == "W8A8_DYNAMIC" and not absorbed:
            off = weights.get(prefix + ".weight_offset")
            assert off is None or not np.any(off), prefix + ".weight_offset must be zeros"
            x = quant_dequant_rows(x)
        elif kind == "W4A8_DYNAMIC" and not absorbed:
            x = quant_dequant_rows(x)  # the weight was dequantized at load (safetensors_np)
        elif kind not in ("FLOAT", "W8A8_DYNAMIC", "W4A8_DYNAMIC"):
            raise ValueError(f"{prefix}.weight: ModelSlim type {kind} is not modelled")
    elif weights.act_quant and int8_module(prefix):
        x = quant_dequant_rows(x)
    elif weights.gguf_types is not None:
        x = gguf_act(weights, prefix + ".weight", x)
    y = x @ need(weights, prefix + ".weight").T
    bias = weights.get(prefix + ".bias")
    return y if bias is None else y + bias


def rms_norm(x, weight, eps):
    """x * rsqrt(mean(x^2, last axis) + eps) * weight (HF RMSNorm, float64 here)."""
    var = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(var + eps) * weight


def norm(weights, name, x, eps):
    """RMSNorm with name.weight, plus name.bias where the checkpoint has one (ModelSlim's
    anti-outlier pass: RMSNorm(x) * w + b)."""
    y = rms_norm(x, need(weights, name + ".weight"), eps)
    bias = weights.get(name + ".bias")
    return y if bias is None else y + bias


def silu(x):
    return x / (1.0 + np.exp(-x))


def swiglu_mlp(weights, prefix, x):
    """down(silu(gate(x)) * up(x)) for prefix.{gate,up,down}_proj."""
    return linear(weights, prefix + ".down_proj",
                  silu(linear(weights, prefix + ".gate_proj", x)) *
                  linear(weights, prefix + ".up_proj", x))


def topk_stable(values, k):
    """Indices of the k largest entries of a 1-D array, largest first; ties -> lower index."""
    return np.argsort(-np.asarray(values), kind="stable")[:k]


# ----------------------------------------------------------------------------------------------
# RoPE

def rope_settings(config):
    """(rope_theta, rope_scaling dict or None) from either config layout: rope_theta +
    rope_scaling (classic), or rope_parameters (newer transformers)."""
    params = config.get("rope_parameters")
    scaling = config.get("rope_scaling")
    theta = config.get("rope_theta")
    if isinstance(params, dict):
        theta = params.get("rope_theta", theta)
        if scaling is None and params.get("rope_type", params.get("type", "default")) != "default":
            scaling = params
    if theta is None:
        theta = 10000.0
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            scaling = None
    return float(theta), scaling


def yarn_get_mscale(scale, mscale=1.0):
    """0.1 * mscale * ln(scale) + 1 for scale > 1, else 1 (DeepSeek / HF yarn_get_mscale)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_range(beta_fast, beta_slow, dim, base, original_max, truncate=True):
    """(low, high) pair indices of the YaRN ramp, as HF find_correction_range computes them."""
    def corr_dim(rot):
        return dim * math.log(original_max / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_inv_freq(dim, base, scaling, default_original_max):
    """YaRN inverse frequencies [dim/2]: blend of extrapolated (1/base^(2i/dim)) and
    interpolated (that / factor) frequencies with a linear ramp over pair index i."""
    factor = float(scaling["factor"])
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1
    original_max = scaling.get("original_max_position_embeddings") or default_original_max
    low, high = yarn_correction_range(beta_fast, beta_slow, dim, base, original_max,
                                      scaling.get("truncate", True))
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation_weight = 1.0 - ramp
    return interpolation * (1.0 - extrapolation_weight) + extrapolation * extrapolation_weight


def rope_tables(inv_freq, positions, attention_factor):
    """cos, sin [n, dim] laid out as cat(freqs, freqs) (HF), each times attention_factor."""
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb) * attention_factor, np.sin(emb) * attention_factor


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope_neox(x, cos, sin):
    """x [..., n, d] with cos/sin [n, d]: x*cos + rotate_half(x)*sin (pairs (i, i + d/2))."""
    return x * cos + rotate_half(x) * sin


def deinterleave(x):
    """[x0, x1, x2, x3, ...] -> [x0, x2, ..., x1, x3, ...] on the last axis (HF's
    view(d/2, 2).transpose(-1, -2).reshape(d))."""
    return np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)


def apply_rope_interleave(x, cos, sin):
    """HF apply_rotary_pos_emb_interleave: deinterleave, then rotate-half RoPE. Rotates pairs
    (x[2i], x[2i+1]) by freq i; the result is in the de-interleaved order."""
    return apply_rope_neox(deinterleave(x), cos, sin)


# ----------------------------------------------------------------------------------------------
# attention

def causal_attention(q, k, v, scale, sliding_window=None):
    """q [H, n, dq], k [H, n, dq], v [H, n, dv] -> [n, H * dv]; query i sees keys j <= i
    (and i - j < sliding_window when given). Softmax in float64 with max subtraction."""
    n = q.shape[1]
    scores = np.einsum("hid,hjd->hij", q, k) * scale
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j <= i
    if sliding_window:
        allowed &= (i - j) < sliding_window
    scores = np.where(allowed[None], scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    out = np.einsum("hij,hjd->hid", p, v)  # [H, n, dv]
    return out.transpose(1, 0, 2).reshape(n, -1)


def lm_head_weight(weights, config):
    if config.get("tie_word_embeddings", False) or "lm_head.weight" not in weights:
        if not config.get("tie_word_embeddings", False):
            raise KeyError("lm_head.weight is missing and tie_word_embeddings is false")
        return need(weights, "model.embed_tokens.weight")
    return weights["lm_head.weight"]


def embed(weights, token_ids):
    table = need(weights, "model.embed_tokens.weight")
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ValueError(f"token id out of range [0, {table.shape[0]})")
    return table[ids].astype(np.float64)


# ----------------------------------------------------------------------------------------------
# CLI

def greedy(hidden_fn, weights, config, prompt, steps):
    """Extends prompt by `steps` argmax tokens (lowest id on ties), recomputing the whole
    sequence each step. Returns (generated ids, top1 - top2 logit margins)."""
    head = lm_head_weight(weights, config)
    seq = list(prompt)
    generated, margins = [], []
    for _ in range(steps):
        h = hidden_fn(weights, config, seq)[-1]
        logits = head @ h
        best = int(np.argmax(logits))
        top2 = np.partition(logits, -2)[-2:] if logits.size > 1 else np.array([0, logits[0]])
        margins.append(float(top2[1] - top2[0]))
        generated.append(best)
        seq.append(best)
    return generated, margins


def main(argv, hidden_fn, model_types):
    """CLI: --model DIR --tokens 1,2,3 --out logits.f32 [--greedy N --greedy-out x.json]
    [--trace-dir DIR]. Logits of every prompt position: raw little-endian float32
    [num_tokens, vocab]."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", help="logits output file (float32 LE, [num_tokens, vocab])")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--greedy-out")
    ap.add_argument("--act-quant", action="store_true",
                    help="simulate W8A8 per-token int8 activations at int8 linears' inputs")
    ap.add_argument("--gguf-act-quant", action="store_true",
                    help="quantize activations as the GGUF dot products do (gguf_types.json of --model)")
    ap.add_argument("--trace-dir", help="writes embed.f32, layer_<i>.f32, norm.f32 [n, hidden]")
    args = ap.parse_args(argv)
    weights, config = load_model(args.model)
    weights.act_quant = args.act_quant
    if args.gguf_act_quant:
        with open(os.path.join(args.model, "gguf_types.json")) as f:
            weights.gguf_types = json.load(f)
    if config.get("model_type") not in model_types:
        sys.exit(f"{args.model}: model_type {config.get('model_type')!r} is not one of "
                 f"{sorted(model_types)}")
    prompt = [int(t) for t in args.tokens.split(",") if t.strip()]
    if not prompt:
        sys.exit("--tokens: at least one token id is needed")
    trace = {} if args.trace_dir else None
    hidden = hidden_fn(weights, config, prompt, trace=trace)
    if args.out:
        if weights.gguf_types is not None:
            tied = "lm_head.weight" not in weights
            hidden = gguf_act(weights, "model.embed_tokens.weight" if tied else "lm_head.weight", hidden)
        logits = hidden @ lm_head_weight(weights, config).T
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        logits.astype("<f4").tofile(args.out)
    if trace is not None:
        os.makedirs(args.trace_dir, exist_ok=True)
        for name, a in trace.items():
            a.astype("<f4").tofile(os.path.join(args.trace_dir, name + ".f32"))
    if args.greedy:
        if not args.greedy_out:
            sys.exit("--greedy needs --greedy-out")
        gen, margins = greedy(hidden_fn, weights, config, prompt, args.greedy)
        with open(args.greedy_out, "w") as f:
            json.dump({"tokens": gen, "prompt": prompt, "sequence": prompt + gen,
                       "margins": margins}, f)
