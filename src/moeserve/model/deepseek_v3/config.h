// DeepSeek-V3/R1 (model_type "deepseek_v3"; Kimi-K2's "kimi_k2" is the same) and DeepSeek-V2 (model_type "deepseek_v2")
// configuration: config.json names verbatim, Hugging Face defaults per model_type, validated once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/io/hf_config.h"
#include "moeserve/model/layers/rope_scaling.h"

namespace moeserve::model {

struct DeepseekV3Config {
    std::string model_type = "deepseek_v3";
    int64_t vocab_size = 129280;
    int64_t hidden_size = 7168;
    int64_t intermediate_size = 18432;  // dense layers
    int64_t moe_intermediate_size = 2048;
    int64_t num_hidden_layers = 61;
    int64_t num_nextn_predict_layers = 0;  // MTP layers after the decoder's (the draft head reads the first)
    int64_t num_attention_heads = 128;
    int64_t num_key_value_heads = 128;
    int64_t n_shared_experts = 1;
    int64_t n_routed_experts = 256;
    double routed_scaling_factor = 2.5;
    int64_t kv_lora_rank = 512;
    std::optional<int64_t> q_lora_rank = 1536;  // null: q_proj instead of q_a/q_b (V2-Lite)
    int64_t qk_rope_head_dim = 64;
    int64_t v_head_dim = 128;
    int64_t qk_nope_head_dim = 128;
    int64_t n_group = 8;
    int64_t topk_group = 4;
    int64_t num_experts_per_tok = 8;
    int64_t first_k_dense_replace = 3;
    int64_t moe_layer_freq = 1;
    bool norm_topk_prob = true;
    std::string scoring_func = "sigmoid";  // "sigmoid" (V3) | "softmax" (V2)
    std::string topk_method = "noaux_tc";  // "noaux_tc" (V3) | "greedy" | "group_limited_greedy" (V2)
    std::string hidden_act = "silu";
    int64_t max_position_embeddings = 4096;
    double rms_norm_eps = 1e-6;
    bool tie_word_embeddings = false;
    bool attention_bias = false;
    RopeScaling rope;             // rope_theta (default 10000) and rope_scaling (YaRN in V3)
    bool rope_interleave = true;  // q_pe/k_pe rotated in pairs (2i, 2i+1) (HF default); false: rotate-half
    std::optional<int64_t> bos_token_id = 0;
    std::vector<int64_t> eos_token_id = {1};

    int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    // Per token per layer, the latent KV cache holds kv_lora_rank + qk_rope_head_dim values.
    int64_t latent_cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }
    // Softmax scale: qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 when rope_scaling
    // is set and mscale_all_dim is non-zero (DeepSeek's YaRN correction).
    double softmax_scale() const;
    // cos/sin multiplier of YaRN (DeepSeek's rule): mscale(factor, mscale) / mscale(factor,
    // mscale_all_dim); 1 for other RoPE types.
    double rope_attention_factor() const;

    // Parses and validates; Error kInvalidModel / kUnsupported naming the field.
    static DeepseekV3Config from_json(const io::HfConfig& j);

    // Routed-expert MoE on this layer (else a dense MLP of intermediate_size), as HF decides it.
    bool is_moe_layer(int64_t layer) const;
};

}  // namespace moeserve::model
