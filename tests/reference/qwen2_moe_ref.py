# Independent float64 numpy forward pass of Qwen2-MoE (HF model_type "qwen2_moe"), the oracle for
# the C++ model tests. Mirrors transformers' Qwen2MoeForCausalLM.
# CLI: --model DIR --tokens 1,2,3 --out logits.f32 [--greedy N --greedy-out t.json]
"""Qwen2-MoE reference forward (float64 from exactly converted checkpoint weights).

Per layer: x += o_proj(causal GQA attention of q, k, v (with biases), RoPE rotate-half, no q/k
norm); x += moe_or_mlp(post_attention_layernorm(x)), the MoE being the softmax top-k experts
(renormalized when norm_topk_prob) plus sigmoid(shared_expert_gate(h)) * shared_expert(h).
Final model.norm, then lm_head. Routing, RoPE and layer kinds as Qwen3-MoE's (qwen3_moe_ref).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_moe_ref as q3  # noqa: E402  (route, rope_for, is_moe_layer: the same rules)
import ref_common as rc  # noqa: E402

MODEL_TYPES = {"qwen2_moe"}


def attention(weights, config, layer, x, cos, sin):
    p = f"model.layers.{layer}.self_attn"
    n = x.shape[0]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    d = config["hidden_size"] // heads
    for proj in ("q_proj", "k_proj", "v_proj"):
        if f"{p}.{proj}.bias" not in weights:
            raise KeyError(f"{p}.{proj}.bias is missing (Qwen2 attention has q/k/v biases)")
    q = rc.linear(weights, p + ".q_proj", x).reshape(n, heads, d).transpose(1, 0, 2)
    k = rc.linear(weights, p + ".k_proj", x).reshape(n, kv_heads, d).transpose(1, 0, 2)
    v = rc.linear(weights, p + ".v_proj", x).reshape(n, kv_heads, d).transpose(1, 0, 2)
    q = rc.apply_rope_neox(q, cos, sin)
    k = rc.apply_rope_neox(k, cos, sin)
    k = np.repeat(k, heads // kv_heads, axis=0)
    v = np.repeat(v, heads // kv_heads, axis=0)
    return rc.linear(weights, p + ".o_proj", rc.causal_attention(q, k, v, d ** -0.5))


def sparse_moe(weights, config, layer, h):
    p = f"model.layers.{layer}.mlp"
    idx, w = q3.route(config, rc.linear(weights, p + ".gate", h))
    out = np.zeros_like(h)
    for e in np.unique(idx):
        rows, slots = np.nonzero(idx == e)
        out[rows] += rc.swiglu_mlp(weights, f"{p}.experts.{e}", h[rows]) * w[rows, slots][:, None]
    # [1, hidden] in the checkpoint, [hidden] as a GGUF stores it: [n, 1] either way
    gate = 1.0 / (1.0 + np.exp(-rc.linear(weights, p + ".shared_expert_gate", h).reshape(-1, 1)))
    return out + gate * rc.swiglu_mlp(weights, p + ".shared_expert", h)


def forward_hidden(weights, config, token_ids, trace=None):
    """Final-normed hidden states [n, hidden] (float64) for token_ids at positions 0..n-1."""
    if config.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {config.get('hidden_act')} is not supported")
    weights = rc.prepare_weights(weights)
    x = rc.embed(weights, token_ids)
    cos, sin = q3.rope_for(config, np.arange(len(token_ids)))
    eps = config["rms_norm_eps"]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        x = x + attention(weights, config, layer, rc.norm(weights, p + ".input_layernorm", x, eps), cos, sin)
        h = rc.norm(weights, p + ".post_attention_layernorm", x, eps)
        x = x + (sparse_moe(weights, config, layer, h) if q3.is_moe_layer(config, layer)
                 else rc.swiglu_mlp(weights, p + ".mlp", h))
        if trace is not None:
            trace[f"layer_{layer}"] = x.copy()
    return rc.norm(weights, "model.norm", x, eps)


if __name__ == "__main__":
    rc.main(sys.argv[1:], forward_hidden, MODEL_TYPES)
