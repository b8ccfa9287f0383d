# Independent float64 numpy forward pass of Qwen3-MoE (HF model_type "qwen3_moe"), the oracle
# for the C++ model tests. Mirrors the semantics of transformers' Qwen3MoeForCausalLM.
# CLI: --model DIR --tokens 1,2,3 --out logits.f32 [--greedy N --greedy-out t.json]
"""Qwen3-MoE reference forward (float64 from exactly converted checkpoint weights).

Per layer: x += o_proj(attn(q_norm(q), k_norm(k) per head, RoPE rotate-half, causal GQA));
x += moe_or_mlp(post_attention_layernorm(x)). Final model.norm, then lm_head.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common as rc  # noqa: E402

MODEL_TYPES = {"qwen3_moe"}


def head_dim_of(config):
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def rope_for(config, positions):
    """(cos, sin) [n, head_dim] for Qwen3 (full head_dim rotary, rotate-half layout)."""
    dim = head_dim_of(config)
    if config.get("partial_rotary_factor", 1.0) != 1.0:
        raise NotImplementedError("partial_rotary_factor != 1 is not supported")
    theta, scaling = rc.rope_settings(config)
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    attention_factor = 1.0
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        factor = float(scaling["factor"])
        if kind == "linear":
            inv_freq = inv_freq / factor
        elif kind == "yarn":
            inv_freq = rc.yarn_inv_freq(dim, theta, scaling, config["max_position_embeddings"])
            attention_factor = scaling.get("attention_factor")
            if attention_factor is None:  # HF _compute_yarn_parameters rule
                m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
                if m and m_all:
                    attention_factor = rc.yarn_get_mscale(factor, m) / rc.yarn_get_mscale(
                        factor, m_all)
                else:
                    attention_factor = rc.yarn_get_mscale(factor)
        else:
            raise NotImplementedError(f"rope type {kind!r} is not supported")
    return rc.rope_tables(inv_freq, positions, float(attention_factor))


def is_moe_layer(config, layer):
    return (layer not in (config.get("mlp_only_layers") or [])
            and config.get("num_experts", 0) > 0
            and (layer + 1) % config.get("decoder_sparse_step", 1) == 0)


def attention(weights, config, layer, x, cos, sin):
    """x [n, hidden] (already normed) -> [n, hidden]."""
    p = f"model.layers.{layer}.self_attn"
    n = x.shape[0]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    d = head_dim_of(config)
    eps = config["rms_norm_eps"]
    if config.get("attention_bias", False) and p + ".q_proj.bias" not in weights:
        raise KeyError(f"attention_bias is true but {p}.q_proj.bias is missing")
    q = rc.linear(weights, p + ".q_proj", x).reshape(n, heads, d)
    k = rc.linear(weights, p + ".k_proj", x).reshape(n, kv_heads, d)
    v = rc.linear(weights, p + ".v_proj", x).reshape(n, kv_heads, d)
    q = rc.norm(weights, p + ".q_norm", q, eps)  # per head, before RoPE
    k = rc.norm(weights, p + ".k_norm", k, eps)
    q = rc.apply_rope_neox(q.transpose(1, 0, 2), cos, sin)  # [heads, n, d]
    k = rc.apply_rope_neox(k.transpose(1, 0, 2), cos, sin)
    v = v.transpose(1, 0, 2)
    group = heads // kv_heads  # query head h reads kv head h // group
    k = np.repeat(k, group, axis=0)
    v = np.repeat(v, group, axis=0)
    window = config.get("sliding_window") if config.get("use_sliding_window") else None
    out = rc.causal_attention(q, k, v, d ** -0.5, window)
    return rc.linear(weights, p + ".o_proj", out)


def route(config, router_logits):
    """router_logits [n, E] -> (idx [n, k], weights [n, k]): softmax over all experts,
    top-k by probability (ties -> lower expert id), renormalized if norm_topk_prob."""
    top_k = config["num_experts_per_tok"]
    z = router_logits - router_logits.max(axis=-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    idx = np.stack([rc.topk_stable(row, top_k) for row in probs])
    w = np.take_along_axis(probs, idx, axis=-1)
    if config.get("norm_topk_prob", False):
        w = w / w.sum(axis=-1, keepdims=True)
    return idx, w


def sparse_moe(weights, config, layer, x):
    p = f"model.layers.{layer}.mlp"
    idx, w = route(config, rc.linear(weights, p + ".gate", x))
    out = np.zeros_like(x)
    for e in np.unique(idx):
        rows, slots = np.nonzero(idx == e)
        y = rc.swiglu_mlp(weights, f"{p}.experts.{e}", x[rows])
        out[rows] += y * w[rows, slots][:, None]
    return out


def forward_hidden(weights, config, token_ids, trace=None):
    """Final-normed hidden states [n, hidden] (float64) for token_ids at positions 0..n-1.
    trace: optional dict that receives embed, layer_<i> (residual after layer i), norm."""
    if config.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {config.get('hidden_act')} is not supported")
    weights = rc.prepare_weights(weights)
    x = rc.embed(weights, token_ids)
    cos, sin = rope_for(config, np.arange(len(token_ids)))
    eps = config["rms_norm_eps"]
    if trace is not None:
        trace["embed"] = x.copy()
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        h = rc.norm(weights, p + ".input_layernorm", x, eps)
        x = x + attention(weights, config, layer, h, cos, sin)
        h = rc.norm(weights, p + ".post_attention_layernorm", x, eps)
        if is_moe_layer(config, layer):
            x = x + sparse_moe(weights, config, layer, h)
        else:
            x = x + rc.swiglu_mlp(weights, p + ".mlp", h)
        if trace is not None:
            trace[f"layer_{layer}"] = x.copy()
    x = rc.norm(weights, "model.norm", x, eps)
    if trace is not None:
        trace["norm"] = x.copy()
    return x


def forward(weights, config, token_ids):
    """Logits [n, vocab] (float64) of every position."""
    weights = rc.prepare_weights(weights)
    return forward_hidden(weights, config, token_ids) @ rc.lm_head_weight(weights, config).T


if __name__ == "__main__":
    rc.main(sys.argv[1:], forward_hidden, MODEL_TYPES)
