# Tiny deterministic random Qwen3-MoE / DeepSeek-V3 checkpoints in the real HF layout, used by
# the self-tests of the reference (and usable by anyone who needs a quick model directory).
"""make_qwen3_moe(dir, **overrides) / make_deepseek(dir, **overrides) -> (weights, config)."""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402

QWEN3_TINY = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
    "vocab_size": 97, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "intermediate_size": 48, "moe_intermediate_size": 24, "num_experts": 8,
    "num_experts_per_tok": 3, "num_hidden_layers": 3, "mlp_only_layers": [1],
    "decoder_sparse_step": 1, "norm_topk_prob": True, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 256,
    "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
    "use_sliding_window": False, "torch_dtype": "bfloat16",
}

DEEPSEEK_V3_TINY = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
    "vocab_size": 101, "hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 4,
    "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
    "v_head_dim": 12, "intermediate_size": 40, "moe_intermediate_size": 16,
    "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 3, "n_group": 4,
    "topk_group": 2, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
    "norm_topk_prob": True, "routed_scaling_factor": 2.5, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "num_hidden_layers": 3, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "max_position_embeddings": 128,
    "rope_scaling": {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 0.8, "mscale_all_dim": 0.9},
    "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}


def _rand(rng, shape, scale):
    return rng.standard_normal(shape) * scale


def _bf16(a):
    """Rounds to bf16 and back, so the returned weights equal what the file holds."""
    return safetensors_np.bf16_bits_to_f32(safetensors_np.f32_to_bf16_bits(a)).astype(np.float64)


def _mlp(rng, t, prefix, hidden, inter):
    t[prefix + ".gate_proj.weight"] = _rand(rng, (inter, hidden), hidden ** -0.5)
    t[prefix + ".up_proj.weight"] = _rand(rng, (inter, hidden), hidden ** -0.5)
    t[prefix + ".down_proj.weight"] = _rand(rng, (hidden, inter), inter ** -0.5)


def _norm(rng, size):
    return 1.0 + 0.2 * rng.standard_normal(size)  # not all ones: a skipped norm shows


def qwen3_tensors(config, seed=0):
    """{name: float64 ndarray} of bf16-representable random weights for a Qwen3-MoE config."""
    rng = np.random.default_rng(seed)
    h, d = config["hidden_size"], config.get("head_dim") or (
        config["hidden_size"] // config["num_attention_heads"])
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    t = {"model.embed_tokens.weight": _rand(rng, (config["vocab_size"], h), 1.0),
         "model.norm.weight": _norm(rng, h)}
    if not config.get("tie_word_embeddings", False):
        t["lm_head.weight"] = _rand(rng, (config["vocab_size"], h), h ** -0.5)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        t[p + ".input_layernorm.weight"] = _norm(rng, h)
        t[p + ".post_attention_layernorm.weight"] = _norm(rng, h)
        a = p + ".self_attn"
        t[a + ".q_proj.weight"] = _rand(rng, (heads * d, h), h ** -0.5)
        t[a + ".k_proj.weight"] = _rand(rng, (kv * d, h), h ** -0.5)
        t[a + ".v_proj.weight"] = _rand(rng, (kv * d, h), h ** -0.5)
        t[a + ".o_proj.weight"] = _rand(rng, (h, heads * d), (heads * d) ** -0.5)
        if config.get("attention_bias", False):
            for proj, rows in (("q", heads * d), ("k", kv * d), ("v", kv * d), ("o", h)):
                t[f"{a}.{proj}_proj.bias"] = _rand(rng, rows, 0.1)
        t[a + ".q_norm.weight"] = _norm(rng, d)
        t[a + ".k_norm.weight"] = _norm(rng, d)
        moe = (i not in (config.get("mlp_only_layers") or []) and config["num_experts"] > 0
               and (i + 1) % config.get("decoder_sparse_step", 1) == 0)
        if moe:
            t[p + ".mlp.gate.weight"] = _rand(rng, (config["num_experts"], h), h ** -0.5)
            for e in range(config["num_experts"]):
                _mlp(rng, t, f"{p}.mlp.experts.{e}", h, config["moe_intermediate_size"])
        else:
            _mlp(rng, t, p + ".mlp", h, config["intermediate_size"])
    return {k: _bf16(v) for k, v in t.items()}


def deepseek_tensors(config, seed=0):
    """{name: float64 ndarray} of bf16-representable random weights for a DeepSeek config."""
    rng = np.random.default_rng(seed)
    h, heads = config["hidden_size"], config["num_attention_heads"]
    d_qk = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    rank = config["kv_lora_rank"]
    t = {"model.embed_tokens.weight": _rand(rng, (config["vocab_size"], h), 1.0),
         "model.norm.weight": _norm(rng, h)}
    if not config.get("tie_word_embeddings", False):
        t["lm_head.weight"] = _rand(rng, (config["vocab_size"], h), h ** -0.5)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        t[p + ".input_layernorm.weight"] = _norm(rng, h)
        t[p + ".post_attention_layernorm.weight"] = _norm(rng, h)
        a = p + ".self_attn"
        if config.get("q_lora_rank") is None:
            t[a + ".q_proj.weight"] = _rand(rng, (heads * d_qk, h), h ** -0.5)
        else:
            r = config["q_lora_rank"]
            t[a + ".q_a_proj.weight"] = _rand(rng, (r, h), h ** -0.5)
            t[a + ".q_a_layernorm.weight"] = _norm(rng, r)
            t[a + ".q_b_proj.weight"] = _rand(rng, (heads * d_qk, r), r ** -0.5)
        t[a + ".kv_a_proj_with_mqa.weight"] = _rand(
            rng, (rank + config["qk_rope_head_dim"], h), h ** -0.5)
        t[a + ".kv_a_layernorm.weight"] = _norm(rng, rank)
        t[a + ".kv_b_proj.weight"] = _rand(
            rng, (heads * (config["qk_nope_head_dim"] + config["v_head_dim"]), rank), rank ** -0.5)
        t[a + ".o_proj.weight"] = _rand(rng, (h, heads * config["v_head_dim"]),
                                        (heads * config["v_head_dim"]) ** -0.5)
        moe = (config.get("n_routed_experts") is not None
               and i >= config.get("first_k_dense_replace", 0)
               and i % config.get("moe_layer_freq", 1) == 0)
        if moe:
            n_exp = config["n_routed_experts"]
            t[p + ".mlp.gate.weight"] = _rand(rng, (n_exp, h), h ** -0.5)
            if config["model_type"] == "deepseek_v3":
                # positive, so biased choice scores stay > 0 (see README on the 0.0 mask)
                t[p + ".mlp.gate.e_score_correction_bias"] = rng.uniform(0.0, 0.2, n_exp)
            for e in range(n_exp):
                _mlp(rng, t, f"{p}.mlp.experts.{e}", h, config["moe_intermediate_size"])
            if config.get("n_shared_experts"):
                _mlp(rng, t, p + ".mlp.shared_experts", h,
                     config["moe_intermediate_size"] * config["n_shared_experts"])
        else:
            _mlp(rng, t, p + ".mlp", h, config["intermediate_size"])
    out = {k: _bf16(v) for k, v in t.items()}
    for k in out:
        if k.endswith("e_score_correction_bias"):
            out[k] = t[k].astype(np.float32).astype(np.float64)  # stored as F32
    return out


def write_model(model_dir, config, tensors, num_shards=1):
    """Writes config.json and the tensors (BF16; correction biases F32) to model_dir."""
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    typed = {k: ("F32" if k.endswith("e_score_correction_bias") else "BF16", v)
             for k, v in tensors.items()}
    if num_shards == 1:
        safetensors_np.write_safetensors(os.path.join(model_dir, "model.safetensors"), typed,
                                         {"format": "pt"})
    else:
        safetensors_np.write_sharded(model_dir, typed, num_shards)


def make_qwen3_moe(model_dir, seed=0, **overrides):
    config = dict(QWEN3_TINY, **overrides)
    tensors = qwen3_tensors(config, seed)
    write_model(model_dir, config, tensors)
    return tensors, config


def make_deepseek(model_dir, seed=0, **overrides):
    config = dict(DEEPSEEK_V3_TINY, **overrides)
    tensors = deepseek_tensors(config, seed)
    write_model(model_dir, config, tensors)
    return tensors, config
