# Independent float64 numpy forward pass of Mixtral (HF model_type "mixtral"), the oracle for the
# C++ model tests. Mirrors the semantics of transformers' MixtralForCausalLM.
# CLI: --model DIR --tokens 1,2,3 --out logits.f32 [--greedy N --greedy-out t.json]
"""Mixtral reference forward (float64 from exactly converted checkpoint weights).

Per layer: x += o_proj(causal GQA attention of q, k with RoPE rotate-half, no q/k norm, over the
last sliding_window keys when the config sets one);
x += sum over the top-k experts of w * w2(silu(w1 h) * w3 h), h = post_attention_layernorm(x),
with w the softmax router probabilities of those experts renormalized to sum to 1. Final
model.norm, then lm_head.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common as rc  # noqa: E402

MODEL_TYPES = {"mixtral"}


def head_dim_of(config):
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def rope_for(config, positions):
    """(cos, sin) [n, head_dim]: full-width rotary, theta from rope_theta (default 1e6), no scaling."""
    dim = head_dim_of(config)
    theta = float(config.get("rope_theta", 1e6))
    if config.get("rope_scaling"):
        raise NotImplementedError("rope_scaling is not part of this reference")
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    return rc.rope_tables(inv_freq, positions, 1.0)


def attention(weights, config, layer, x, cos, sin):
    p = f"model.layers.{layer}.self_attn"
    n = x.shape[0]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    d = head_dim_of(config)
    q = rc.linear(weights, p + ".q_proj", x).reshape(n, heads, d).transpose(1, 0, 2)
    k = rc.linear(weights, p + ".k_proj", x).reshape(n, kv_heads, d).transpose(1, 0, 2)
    v = rc.linear(weights, p + ".v_proj", x).reshape(n, kv_heads, d).transpose(1, 0, 2)
    # rope_interleave: a llama GGUF's q/k rows, permuted to adjacent pairs (formats/gguf_llama.cpp)
    rope = rc.apply_rope_interleave if config.get("rope_interleave") else rc.apply_rope_neox
    q = rope(q, cos, sin)
    k = rope(k, cos, sin)
    k = np.repeat(k, heads // kv_heads, axis=0)
    v = np.repeat(v, heads // kv_heads, axis=0)
    return rc.linear(weights, p + ".o_proj", rc.causal_attention(q, k, v, d ** -0.5, config.get("sliding_window")))


def sparse_moe(weights, config, layer, h):
    p = f"model.layers.{layer}.block_sparse_moe"
    logits = rc.linear(weights, p + ".gate", h)
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = z / z.sum(axis=-1, keepdims=True)
    top_k = config["num_experts_per_tok"]
    idx = np.stack([rc.topk_stable(row, top_k) for row in probs])
    w = np.take_along_axis(probs, idx, axis=-1)
    w = w / w.sum(axis=-1, keepdims=True)
    out = np.zeros_like(h)
    for e in np.unique(idx):
        rows, slots = np.nonzero(idx == e)
        x = h[rows]
        e_p = f"{p}.experts.{e}"
        y = rc.linear(weights, e_p + ".w2",
                      rc.silu(rc.linear(weights, e_p + ".w1", x)) * rc.linear(weights, e_p + ".w3", x))
        out[rows] += y * w[rows, slots][:, None]
    return out


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
        x = x + sparse_moe(weights, config, layer, rc.norm(weights, p + ".post_attention_layernorm", x, eps))
        if trace is not None:
            trace[f"layer_{layer}"] = x.copy()
    return rc.norm(weights, "model.norm", x, eps)


if __name__ == "__main__":
    rc.main(sys.argv[1:], forward_hidden, MODEL_TYPES)
