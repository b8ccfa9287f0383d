# Independent float64 numpy forward pass of gpt-oss (HF model_type "gpt_oss"), the oracle for the
# C++ model tests. Mirrors the semantics of transformers' GptOssForCausalLM (eager attention).
# CLI: --model DIR --tokens 1,2,3 --out logits.f32 [--greedy N --greedy-out t.json]
"""gpt-oss reference forward (float64 from exactly converted checkpoint weights).

Per layer: x += o_proj(attention), where q/k/v/o have biases, q and k get YaRN RoPE
(rotate-half), and each head's softmax runs over its keys plus one learned sink logit
(self_attn.sinks) whose probability is dropped; layers of layer_types "sliding_attention" see the
last sliding_window keys only. Then x += MoE(post_attention_layernorm(x)): router logits
x W^T + b, the top-k logits softmaxed among themselves; each chosen expert computes
gate_up = x @ gate_up_proj[e] + bias (gate = columns 0::2, up = 1::2), gate clamped above at
swiglu_limit, up clamped to +-swiglu_limit, (up + 1) * gate * sigmoid(1.702 gate) @ down_proj[e]
+ down bias, weighted. Final model.norm, then lm_head.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common as rc  # noqa: E402

MODEL_TYPES = {"gpt_oss"}
ALPHA = 1.702
MXFP4_FLAG = "__mxfp4_experts__"
FLOAT_ACTIVATIONS = False  # --float-activations: no q8_0 on the MXFP4 experts' inputs


def rope_for(config, positions):
    """(cos, sin) [n, head_dim]: YaRN over the whole head, times its attention factor."""
    dim = config["head_dim"]
    theta, scaling = rc.rope_settings(config)
    if scaling is None:
        return rc.rope_tables(1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim), positions, 1.0)
    if scaling.get("rope_type", scaling.get("type")) != "yarn":
        raise NotImplementedError("only YaRN rope_scaling is part of this reference")
    inv_freq = rc.yarn_inv_freq(dim, theta, scaling, config["max_position_embeddings"])
    factor = scaling.get("attention_factor") or rc.yarn_get_mscale(float(scaling["factor"]))
    return rc.rope_tables(inv_freq, positions, factor)


def layer_window(config, layer):
    types = config.get("layer_types") or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(config["num_hidden_layers"])]
    return config["sliding_window"] if types[layer] == "sliding_attention" else None


def attention_with_sinks(q, k, v, sinks, scale, window):
    """q [H, n, d], k/v [H, n, d], sinks [H] -> [n, H * d]."""
    n = q.shape[1]
    scores = np.einsum("hid,hjd->hij", q, k) * scale
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j <= i
    if window:
        allowed &= (i - j) < window
    scores = np.where(allowed[None], scores, -np.inf)
    sink_col = np.broadcast_to(sinks[:, None, None], (q.shape[0], n, 1))
    combined = np.concatenate([scores, sink_col], axis=-1)
    combined = combined - combined.max(axis=-1, keepdims=True)
    p = np.exp(combined)
    p = p / p.sum(axis=-1, keepdims=True)
    out = np.einsum("hij,hjd->hid", p[..., :-1], v)
    return out.transpose(1, 0, 2).reshape(n, -1)


def attention(weights, config, layer, x, cos, sin):
    p = f"model.layers.{layer}.self_attn"
    n = x.shape[0]
    heads, kv_heads, d = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    q = rc.linear(weights, p + ".q_proj", x).reshape(n, heads, d).transpose(1, 0, 2)
    k = rc.linear(weights, p + ".k_proj", x).reshape(n, kv_heads, d).transpose(1, 0, 2)
    v = rc.linear(weights, p + ".v_proj", x).reshape(n, kv_heads, d).transpose(1, 0, 2)
    q = rc.apply_rope_neox(q, cos, sin)
    k = rc.apply_rope_neox(k, cos, sin)
    k = np.repeat(k, heads // kv_heads, axis=0)
    v = np.repeat(v, heads // kv_heads, axis=0)
    sinks = rc.need(weights, p + ".sinks")
    out = attention_with_sinks(q, k, v, sinks, d ** -0.5, layer_window(config, layer))
    return rc.linear(weights, p + ".o_proj", out)


def sparse_moe(weights, config, layer, h):
    p = f"model.layers.{layer}.mlp"
    logits = rc.linear(weights, p + ".router", h)
    top_k = config["num_experts_per_tok"]
    idx = np.stack([rc.topk_stable(row, top_k) for row in logits])
    top = np.take_along_axis(logits, idx, axis=-1)
    w = np.exp(top - top.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    limit = config.get("swiglu_limit", 7.0)
    out = np.zeros_like(h)
    for e in np.unique(idx):
        rows, slots = np.nonzero(idx == e)
        gate, up = expert_gate_up(weights, p + ".experts", e, h[rows])
        gate = np.minimum(gate, limit)
        up = np.clip(up, -limit, limit)
        glu = gate / (1.0 + np.exp(-ALPHA * gate))
        y = expert_down(weights, p + ".experts", e, (up + 1.0) * glu)
        out[rows] += y * w[rows, slots][:, None]
    return out


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_stack(weights, name):
    """An MXFP4 checkpoint's <name>_blocks [E, out, in/32, 16] + _scales [E, out, in/32] as the
    input-major float stack [E, in, out]: e2m1 value of each nibble (element 2i low, 2i + 1 high)
    times 2^(scale - 127)."""
    blocks = np.asarray(weights[name + "_blocks"]).astype(np.uint8)
    scales = np.asarray(weights[name + "_scales"]).astype(np.int64)
    lo, hi = E2M1[blocks & 0x0F], E2M1[blocks >> 4]
    vals = np.stack([lo, hi], axis=-1).reshape(blocks.shape[:-1] + (32,))
    vals = vals * np.exp2(scales - 127)[..., None]
    e, out = vals.shape[0], vals.shape[1]
    return vals.reshape(e, out, -1).transpose(0, 2, 1)


def prepare_mxfp4(weights, config):
    """An MXFP4 checkpoint's stacked experts widened in place (the float stacks under their names).
    Returns whether there were any: then moeserve's dot products see the experts' inputs as q8_0."""
    names = [n[:-len("_blocks")] for n in list(weights.keys()) if n.endswith("_blocks")]
    for name in names:
        weights[name] = mxfp4_stack(weights, name)
    return bool(names)


def expert_gate_up(weights, p, e, x):
    """(gate, up) of expert e on x, biases added: from the checkpoint's stacked, interleaved
    gate_up_proj [E, hidden, 2 inter], or from a GGUF's split per-expert tensors (its dequantized
    form: experts.E.gate_proj / up_proj [inter, hidden], gate_proj_bias / up_proj_bias [E, inter])."""
    if p + ".gate_up_proj" in weights:
        if weights.get(MXFP4_FLAG) is not None:
            x = rc.q8_0_act(x)
        gate_up = x @ weights[p + ".gate_up_proj"][e] + weights[p + ".gate_up_proj_bias"][e]
        return gate_up[:, 0::2], gate_up[:, 1::2]
    gate = rc.linear(weights, f"{p}.{e}.gate_proj", x) + rc.need(weights, p + ".gate_proj_bias")[e]
    up = rc.linear(weights, f"{p}.{e}.up_proj", x) + rc.need(weights, p + ".up_proj_bias")[e]
    return gate, up


def expert_down(weights, p, e, a):
    """Expert e's down projection of a, its bias added (down_proj [E, inter, hidden], or a GGUF's
    experts.E.down_proj [hidden, inter])."""
    if p + ".down_proj" in weights:
        if weights.get(MXFP4_FLAG) is not None:
            a = rc.q8_0_act(a)
        return a @ weights[p + ".down_proj"][e] + weights[p + ".down_proj_bias"][e]
    return rc.linear(weights, f"{p}.{e}.down_proj", a) + rc.need(weights, p + ".down_proj_bias")[e]


def forward_hidden(weights, config, token_ids, trace=None):
    """Final-normed hidden states [n, hidden] (float64) for token_ids at positions 0..n-1."""
    weights = rc.prepare_weights(weights)
    if MXFP4_FLAG not in weights and prepare_mxfp4(weights, config) and not FLOAT_ACTIVATIONS:
        weights[MXFP4_FLAG] = np.zeros(1)  # MXFP4 experts: q8_0 activations, as moeserve runs them
    x = rc.embed(weights, token_ids)
    cos, sin = rope_for(config, np.arange(len(token_ids)))
    eps = config["rms_norm_eps"]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        x = x + attention(weights, config, layer, rc.norm(weights, p + ".input_layernorm", x, eps), cos, sin)
        x = x + sparse_moe(weights, config, layer, rc.norm(weights, p + ".post_attention_layernorm", x, eps))
        if trace is not None:
            trace[f"layer_{layer}"] = x.copy()
    return rc.norm(weights, "model.norm", x, eps)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--float-activations" in argv:  # MXFP4 experts widened (moeserve --quantization none)
        argv.remove("--float-activations")
        FLOAT_ACTIVATIONS = True
    rc.main(argv, forward_hidden, MODEL_TYPES)
