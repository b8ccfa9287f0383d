# MindSpore golden-stick A8W8 (MindFormers names, DeepSeek-V3) for the float64 reference, written
# from the golden-stick part of docs/quantization.md "The checkpoint formats' spec", not from
# moeserve's loader: the name map, the rope row order, kv_b_proj from its halves, stacked experts,
# and the static A8W8 arithmetic.
"""MindFormers golden-stick A8W8 checkpoint -> HF-named float64 weights + static parameters."""

import numpy as np


def _unpermute_rope(a, blocks, r):
    """MindFormers keeps each rope block's even HF rows first, then its odd rows; undo that."""
    out = np.array(a, copy=True)
    for b in blocks:
        blk = np.asarray(a)[b:b + r]
        out[b:b + r:2] = blk[: r // 2]
        out[b + 1:b + r:2] = blk[r // 2:]
    return out


def _deq_scale(d):
    d = np.asarray(d)
    if d.dtype.kind in "iu":  # the int64 form: f32 bits in the low 32 bits
        return (d.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    return d.astype(np.float64)


def convert(raw, config):
    """{MindFormers name: ndarray} -> ({HF name: ndarray}, set of static linear prefixes). Static
    linears keep weight (int8), deq_scale, quant_bias, input_scale [K] (the divisor), input_zp."""
    r = config["qk_rope_head_dim"]
    heads, nope, v = config["num_attention_heads"], config["qk_nope_head_dim"], config["v_head_dim"]
    lkv = config["kv_lora_rank"]
    out, static = {}, set()
    used = set()

    def take(name):
        used.add(name)
        return raw[name]

    out["model.embed_tokens.weight"] = take("model.tok_embeddings.embedding_weight")
    out["model.norm.weight"] = take("model.norm_out.weight")
    if "lm_head.weight" in raw:
        out["lm_head.weight"] = take("lm_head.weight")
    for i in range(config["num_hidden_layers"]):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.attention."
        s, f = p + "self_attn.", p + "feed_forward."
        out[p + "input_layernorm.weight"] = take(p + "attention_norm.weight")
        out[p + "post_attention_layernorm.weight"] = take(p + "ffn_norm.weight")
        out[s + "q_a_layernorm.weight"] = take(a + "lq_norm.weight")
        out[s + "kv_a_layernorm.weight"] = take(a + "lkv_norm.weight")
        q_blocks = [h * (nope + r) + nope for h in range(heads)]
        for hf, mf, blocks in (("q_a_proj", "q2l_proj", []), ("kv_a_proj_with_mqa", "kv2l", [lkv]),
                               ("q_b_proj", "l2q_proj", q_blocks), ("o_proj", "wo", [])):
            w = take(a + mf + "._layer.weight")
            k = w.shape[1]
            out[s + hf + ".weight"] = _unpermute_rope(w, blocks, r)
            out[s + hf + ".deq_scale"] = _unpermute_rope(
                _deq_scale(take(a + mf + "._layer.matmul.dequant_scale")), blocks, r)
            out[s + hf + ".quant_bias"] = _unpermute_rope(take(a + mf + "._layer.matmul.quant_bias"), blocks, r)
            scale = np.asarray(take(a + mf + ".quant_op.input_scale"), np.float64).reshape(-1)
            zp = np.asarray(take(a + mf + ".quant_op.input_zp"), np.float64).reshape(-1)
            out[s + hf + ".input_scale"] = np.broadcast_to(scale, (k,)).copy()
            out[s + hf + ".input_zp"] = np.broadcast_to(zp, (k,)).copy()
            static.add(s + hf)
        kn = np.asarray(take(a + "lkv2kv_k_nope.weight")).reshape(heads, nope, lkv)
        vv = np.asarray(take(a + "lkv2kv_v.weight")).reshape(heads, v, lkv)
        out[s + "kv_b_proj.weight"] = np.concatenate([kn, vv], axis=1).reshape(heads * (nope + v), lkv)

        def dyn(hf_prefix, mf_prefix):
            for hf, mf in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
                w = np.asarray(take(mf_prefix + mf + "._layer.weight"), np.float64)
                sc = np.asarray(take(mf_prefix + mf + "._layer.matmul.weight_scale"), np.float64)
                out[hf_prefix + hf + ".weight"] = w * sc.reshape(-1, 1)

        if f + "routed_experts.router.dense.weight" not in raw:
            dyn(p + "mlp.", f)
            continue
        out[p + "mlp.gate.weight"] = take(f + "routed_experts.router.dense.weight")
        bias = f + "routed_experts.router.e_score_correction_bias"
        if bias in raw:
            out[p + "mlp.gate.e_score_correction_bias"] = take(bias)
        for hf, mf in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
            w = np.asarray(take(f + "routed_experts.ffn." + mf + "._layer.weight"), np.float64)  # [E, in, out]
            sc = np.asarray(take(f + "routed_experts.ffn." + mf + "._layer.matmul.weight_scale"), np.float64)
            for e in range(w.shape[0]):
                out[f"{p}mlp.experts.{e}.{hf}.weight"] = w[e].T * sc[e].reshape(-1, 1)
        if f + "shared_experts.w1._layer.weight" in raw:
            dyn(p + "mlp.shared_experts.", f + "shared_experts.")
    unused = sorted(set(raw) - used)
    if unused:
        raise ValueError(f"golden-stick: tensors the map does not know: {unused[:3]}")
    return out, static


def static_a8w8(weights, prefix, x):
    """q = sat8(rint(x / input_scale[k] + input_zp)), y = (q @ W_q^T + quant_bias) * dequant_scale."""
    q = np.clip(np.rint(x / weights[prefix + ".input_scale"] + weights[prefix + ".input_zp"]), -128, 127)
    acc = q @ np.asarray(weights[prefix + ".weight"]).astype(np.float64).T  # exact integers
    bias = np.asarray(weights[prefix + ".quant_bias"]).astype(np.float64)
    return (acc + bias) * weights[prefix + ".deq_scale"]
