# Independent float64 numpy forward pass of GLM-4.5 (HF model_type "glm4_moe"), the oracle for the
# C++ model tests. Mirrors transformers' Glm4MoeForCausalLM.
# CLI: --model DIR --tokens 1,2,3 --out logits.f32 [--greedy N --greedy-out t.json]
"""GLM-4.5 reference forward (float64 from exactly converted checkpoint weights).

Per layer: x += o_proj(causal GQA attention; q/k/v with biases when attention_bias, q_norm/k_norm
per head when use_qk_norm, RoPE rotate-half on the first head_dim * partial_rotary_factor dims
of each head, the rest unrotated); x += moe_or_mlp(post_attention_layernorm(x)): the first
first_k_dense_replace layers dense, the others DeepSeek-V3's router (sigmoid + correction bias,
top-2-sum groups, renormalized, scaled: deepseek_v3_ref.route) plus the shared experts.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_v3_ref as dsv3  # noqa: E402  (route: the same router)
import ref_common as rc  # noqa: E402

MODEL_TYPES = {"glm4_moe"}


def head_dim_of(config):
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def rope_for(config, positions):
    """(cos, sin) [n, rotary_dim]: rotary over the first head_dim * partial_rotary_factor dims."""
    rot = int(head_dim_of(config) * config.get("partial_rotary_factor", 0.5))
    theta = float(config.get("rope_theta", 10000.0))
    if config.get("rope_scaling"):
        raise NotImplementedError("rope_scaling is not part of this reference")
    inv_freq = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    return rc.rope_tables(inv_freq, positions, 1.0)


def attention(weights, config, layer, x, cos, sin):
    p = f"model.layers.{layer}.self_attn"
    n = x.shape[0]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    d = head_dim_of(config)
    rot = cos.shape[-1]
    q = rc.linear(weights, p + ".q_proj", x).reshape(n, heads, d)
    k = rc.linear(weights, p + ".k_proj", x).reshape(n, kv_heads, d)
    v = rc.linear(weights, p + ".v_proj", x).reshape(n, kv_heads, d).transpose(1, 0, 2)
    if config.get("use_qk_norm", False):
        q = rc.norm(weights, p + ".q_norm", q, config["rms_norm_eps"])
        k = rc.norm(weights, p + ".k_norm", k, config["rms_norm_eps"])
    q, k = q.transpose(1, 0, 2), k.transpose(1, 0, 2)
    q = np.concatenate([rc.apply_rope_neox(q[..., :rot], cos, sin), q[..., rot:]], axis=-1)
    k = np.concatenate([rc.apply_rope_neox(k[..., :rot], cos, sin), k[..., rot:]], axis=-1)
    k = np.repeat(k, heads // kv_heads, axis=0)
    v = np.repeat(v, heads // kv_heads, axis=0)
    return rc.linear(weights, p + ".o_proj", rc.causal_attention(q, k, v, d ** -0.5))


def sparse_moe(weights, config, layer, h):
    p = f"model.layers.{layer}.mlp"
    router = dict(config, model_type="deepseek_v3", scoring_func="sigmoid", topk_method="noaux_tc")
    bias = np.asarray(weights[p + ".gate.e_score_correction_bias"], np.float64)
    idx, w = dsv3.route(router, rc.linear(weights, p + ".gate", h), bias)
    out = np.zeros_like(h)
    for e in np.unique(idx):
        rows, slots = np.nonzero(idx == e)
        out[rows] += rc.swiglu_mlp(weights, f"{p}.experts.{e}", h[rows]) * w[rows, slots][:, None]
    return out + rc.swiglu_mlp(weights, p + ".shared_experts", h)


def forward_hidden(weights, config, token_ids, trace=None):
    """Final-normed hidden states [n, hidden] (float64) for token_ids at positions 0..n-1."""
    if config.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {config.get('hidden_act')} is not supported")
    weights = rc.prepare_weights(weights)
    x = rc.embed(weights, token_ids)
    cos, sin = rope_for(config, np.arange(len(token_ids)))
    eps = config["rms_norm_eps"]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        x = x + attention(weights, config, layer, rc.norm(weights, p + ".input_layernorm", x, eps), cos, sin)
        h = rc.norm(weights, p + ".post_attention_layernorm", x, eps)
        dense = layer < config.get("first_k_dense_replace", 1)
        x = x + (rc.swiglu_mlp(weights, p + ".mlp", h) if dense else sparse_moe(weights, config, layer, h))
        if trace is not None:
            trace[f"layer_{layer}"] = x.copy()
    return rc.norm(weights, "model.norm", x, eps)


if __name__ == "__main__":
    rc.main(sys.argv[1:], forward_hidden, MODEL_TYPES)
