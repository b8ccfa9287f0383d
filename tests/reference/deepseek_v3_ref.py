# Independent float64 numpy forward pass of DeepSeek-V3 / V2 (MLA attention, grouped sigmoid or
# softmax routing, shared experts), the oracle for the C++ model tests. Mirrors transformers'
# DeepseekV3ForCausalLM and DeepSeek's own modeling_deepseek.py where they differ (noted inline).
"""DeepSeek-V3 / V2 reference forward (float64 from exactly converted checkpoint weights).

CLI: --model DIR --tokens 1,2,3 --out logits.f32 [--greedy N --greedy-out t.json]
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common as rc  # noqa: E402

MODEL_TYPES = {"deepseek_v3", "deepseek_v2", "kimi_k2"}  # kimi_k2: DeepSeek-V3's architecture
# q_a_layernorm / kv_a_layernorm are built without an eps argument in both HF and DeepSeek code.
LORA_NORM_EPS = 1e-6


def yarn_factors(config):
    """(rope scaling dict or None, cos/sin multiplier, softmax scale multiplier)."""
    _, scaling = rc.rope_settings(config)
    if scaling is None:
        return None, 1.0, 1.0
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = float(scaling["factor"])
    mscale_all_dim = scaling.get("mscale_all_dim") or 0
    softmax_mult = rc.yarn_get_mscale(factor, mscale_all_dim) ** 2 if mscale_all_dim else 1.0
    if kind == "yarn":
        # DeepSeek's DeepseekV3YarnRotaryEmbedding: _mscale = m(factor, mscale) /
        # m(factor, mscale_all_dim), mscale defaulting to 1 and mscale_all_dim to 0.
        cos_mult = rc.yarn_get_mscale(factor, scaling.get("mscale", 1)) / rc.yarn_get_mscale(
            factor, mscale_all_dim)
    elif kind == "linear":
        cos_mult = 1.0
    else:
        raise NotImplementedError(f"rope type {kind!r} is not supported")
    return scaling, cos_mult, softmax_mult


def rope_for(config, positions):
    """(cos, sin) [n, qk_rope_head_dim], cat(freqs, freqs) layout, times the YaRN mscale."""
    dim = config["qk_rope_head_dim"]
    theta, _ = rc.rope_settings(config)
    scaling, cos_mult, _ = yarn_factors(config)
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "yarn":
            inv_freq = rc.yarn_inv_freq(dim, theta, scaling, config["max_position_embeddings"])
        else:
            inv_freq = inv_freq / float(scaling["factor"])
    return rc.rope_tables(inv_freq, positions, cos_mult)


def softmax_scale(config):
    qk_head_dim = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    return qk_head_dim ** -0.5 * yarn_factors(config)[2]


def apply_rope(config, x, cos, sin):
    if config.get("rope_interleave", True):
        return rc.apply_rope_interleave(x, cos, sin)
    return rc.apply_rope_neox(x, cos, sin)


def mla_attention(weights, config, layer, x, cos, sin):
    """Multi-head latent attention, computed in the expanded (non-absorbed) form.
    x [n, hidden] (already normed) -> [n, hidden]."""
    p = f"model.layers.{layer}.self_attn"
    n = x.shape[0]
    heads = config["num_attention_heads"]
    d_nope, d_rope = config["qk_nope_head_dim"], config["qk_rope_head_dim"]
    d_v, rank = config["v_head_dim"], config["kv_lora_rank"]
    if config.get("q_lora_rank") is None:
        q = rc.linear(weights, p + ".q_proj", x)
    else:
        qa = rc.linear(weights, p + ".q_a_proj", x)
        qa = rc.norm(weights, p + ".q_a_layernorm", qa, LORA_NORM_EPS)
        q = rc.linear(weights, p + ".q_b_proj", qa)
    q = q.reshape(n, heads, d_nope + d_rope).transpose(1, 0, 2)  # [H, n, d_nope + d_rope]
    q_nope, q_pe = q[..., :d_nope], q[..., d_nope:]

    kv_a = rc.linear(weights, p + ".kv_a_proj_with_mqa", x)  # [n, rank + d_rope]
    latent, k_pe = kv_a[:, :rank], kv_a[:, rank:]
    latent = rc.norm(weights, p + ".kv_a_layernorm", latent, LORA_NORM_EPS)
    kv = rc.linear(weights, p + ".kv_b_proj", latent)  # [n, H * (d_nope + d_v)]
    kv = kv.reshape(n, heads, d_nope + d_v).transpose(1, 0, 2)
    k_nope, v = kv[..., :d_nope], kv[..., d_nope:]

    q_pe = apply_rope(config, q_pe, cos, sin)
    k_pe = apply_rope(config, k_pe[None], cos, sin)  # one rope key shared by all heads
    qf = np.concatenate([q_nope, q_pe], axis=-1)
    kf = np.concatenate([k_nope, np.broadcast_to(k_pe, (heads, n, d_rope))], axis=-1)
    out = rc.causal_attention(qf, kf, v, softmax_scale(config))
    return rc.linear(weights, p + ".o_proj", out)


def is_moe_layer(config, layer):
    """DeepSeek's rule; transformers' DeepseekV3 ignores moe_layer_freq (same when it is 1)."""
    return (config.get("n_routed_experts") is not None
            and layer >= config.get("first_k_dense_replace", 0)
            and layer % config.get("moe_layer_freq", 1) == 0)


def route(config, logits, bias):
    """logits [n, E] (x @ gate.weight.T) -> (idx [n, k], weights [n, k]).

    deepseek_v3 (scoring sigmoid, topk_method noaux_tc): choice score = sigmoid + bias; each of
    n_group groups scores the sum of its top-2 choice scores; the topk_group best groups stay,
    other experts' choice scores become 0.0 (HF masked_fill); top-k over those. Weights are the
    unbiased sigmoid scores; / (sum + 1e-20) if norm_topk_prob; * routed_scaling_factor.
    deepseek_v2 (softmax; greedy or group_limited_greedy with group score = max): weights are
    the chosen softmax probabilities; / (sum + 1e-20) if top_k > 1 and norm_topk_prob, else
    * routed_scaling_factor (DeepSeek's V2 MoEGate). Ties: lower expert id wins.
    """
    v3 = config.get("model_type") != "deepseek_v2"
    n_exp = config["n_routed_experts"]
    top_k = config["num_experts_per_tok"]
    scoring = config.get("scoring_func", "sigmoid" if v3 else "softmax")
    method = config.get("topk_method", "noaux_tc" if v3 else "greedy")
    if scoring == "sigmoid":
        scores = 1.0 / (1.0 + np.exp(-logits))
    elif scoring == "softmax":
        z = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = z / z.sum(axis=-1, keepdims=True)
    else:
        raise NotImplementedError(f"scoring_func {scoring!r} is not supported")
    choice = scores + bias[None, :] if method == "noaux_tc" else scores
    n_group = config.get("n_group") or 1
    topk_group = config.get("topk_group") or n_group
    per_group = n_exp // n_group
    idx = np.zeros((logits.shape[0], top_k), dtype=np.int64)
    for t in range(logits.shape[0]):
        c = choice[t]
        if method in ("noaux_tc", "group_limited_greedy"):
            g = c.reshape(n_group, per_group)
            if method == "noaux_tc":
                group_score = np.sort(g, axis=-1)[:, -2:].sum(axis=-1)
            else:
                group_score = g.max(axis=-1)
            keep = np.zeros(n_group, dtype=bool)
            keep[rc.topk_stable(group_score, topk_group)] = True
            c = np.where(np.repeat(keep, per_group), c, 0.0)
        elif method != "greedy":
            raise NotImplementedError(f"topk_method {method!r} is not supported")
        idx[t] = rc.topk_stable(c, top_k)
    w = np.take_along_axis(scores, idx, axis=-1)
    scaling = config.get("routed_scaling_factor", 1.0)
    if v3:
        if config.get("norm_topk_prob", False):
            w = w / (w.sum(axis=-1, keepdims=True) + 1e-20)
        w = w * scaling
    elif top_k > 1 and config.get("norm_topk_prob", False):
        w = w / (w.sum(axis=-1, keepdims=True) + 1e-20)
    else:
        w = w * scaling
    return idx, w


def moe(weights, config, layer, x):
    p = f"model.layers.{layer}.mlp"
    bias = weights.get(p + ".gate.e_score_correction_bias")
    if bias is None:
        bias = np.zeros(config["n_routed_experts"])
    idx, w = route(config, rc.linear(weights, p + ".gate", x), np.asarray(bias, np.float64))
    out = np.zeros_like(x)
    for e in np.unique(idx):
        rows, slots = np.nonzero(idx == e)
        y = rc.swiglu_mlp(weights, f"{p}.experts.{e}", x[rows])
        out[rows] += y * w[rows, slots][:, None]
    if config.get("n_shared_experts"):
        out = out + rc.swiglu_mlp(weights, p + ".shared_experts", x)
    return out


def decoder_layer(weights, config, layer, x, cos, sin):
    """One decoder layer on the residual stream x [n, hidden] -> [n, hidden]."""
    p = f"model.layers.{layer}"
    eps = config["rms_norm_eps"]
    h = rc.norm(weights, p + ".input_layernorm", x, eps)
    x = x + mla_attention(weights, config, layer, h, cos, sin)
    h = rc.norm(weights, p + ".post_attention_layernorm", x, eps)
    if is_moe_layer(config, layer):
        return x + moe(weights, config, layer, h)
    return x + rc.swiglu_mlp(weights, p + ".mlp", h)


def mtp_logits(weights, config, token_ids):
    """Logits [n - 1, vocab] of the first MTP layer (model.layers.{num_hidden_layers}, as
    DeepSeek-V3 checkpoints hold it): position i reads the main model's final normed hidden state
    h_i and the embedding of token i+1, eh_proj(cat(enorm(embed), hnorm(h_i))), runs that layer
    at RoPE position i, and predicts token i+2 through shared_head.norm and shared_head.head."""
    weights = rc.prepare_weights(weights)
    n_layer = config["num_hidden_layers"]
    p = f"model.layers.{n_layer}"
    eps = config["rms_norm_eps"]
    h = forward_hidden(weights, config, token_ids)[:-1]
    table = weights.get(p + ".embed_tokens.weight")
    e = (rc.need(weights, "model.embed_tokens.weight") if table is None else table)[np.asarray(token_ids[1:])]
    x = np.concatenate([rc.norm(weights, p + ".enorm", e, eps), rc.norm(weights, p + ".hnorm", h, eps)], -1)
    x = rc.linear(weights, p + ".eh_proj", x)
    cos, sin = rope_for(config, np.arange(len(token_ids) - 1))
    x = decoder_layer(weights, config, n_layer, x, cos, sin)
    x = rc.norm(weights, p + ".shared_head.norm", x, eps)
    return x @ rc.need(weights, p + ".shared_head.head.weight").T


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
        x = decoder_layer(weights, config, layer, x, cos, sin)
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


def mtp_main(argv):
    """CLI: --model DIR --tokens 1,2,3 --mtp-out FILE [--act-quant]: the MTP layer's logits
    (mtp_logits), little-endian float32 [num_tokens - 1, vocab]."""
    import argparse
    ap = argparse.ArgumentParser(description=mtp_main.__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--mtp-out", required=True)
    ap.add_argument("--act-quant", action="store_true",
                    help="simulate W8A8 per-token int8 activations at int8 linears' inputs")
    args = ap.parse_args(argv)
    weights, config = rc.load_model(args.model)
    weights.act_quant = args.act_quant
    ids = [int(t) for t in args.tokens.split(",") if t.strip()]
    os.makedirs(os.path.dirname(os.path.abspath(args.mtp_out)), exist_ok=True)
    mtp_logits(weights, config, ids).astype("<f4").tofile(args.mtp_out)


if __name__ == "__main__":
    if "--mtp-out" in sys.argv:
        mtp_main(sys.argv[1:])
    else:
        rc.main(sys.argv[1:], forward_hidden, MODEL_TYPES)
