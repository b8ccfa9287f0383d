// GLM-4.5 / 4.6 / 4.5-Air configuration (model_type "glm4_moe", Glm4MoeForCausalLM): config.json
// field names verbatim, Hugging Face defaults for missing fields, validated once in from_json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/io/hf_config.h"
#include "moeserve/model/layers/rope_scaling.h"

namespace moeserve::model {

struct Glm4MoeConfig {
    int64_t vocab_size = 151552;
    int64_t hidden_size = 4096;
    int64_t intermediate_size = 10944;  // the first_k_dense_replace dense layers
    int64_t num_hidden_layers = 46;
    int64_t num_attention_heads = 96;
    int64_t num_key_value_heads = 8;
    int64_t head_dim = 0;                // 0: hidden_size / num_attention_heads
    double partial_rotary_factor = 0.5;  // RoPE on the first head_dim * factor dims of each head
    std::string hidden_act = "silu";
    int64_t max_position_embeddings = 131072;
    double rms_norm_eps = 1e-5;
    bool tie_word_embeddings = false;
    RopeScaling rope;             // rope_theta (default 10000) and rope_scaling
    bool attention_bias = false;  // q/k/v biases
    bool use_qk_norm = false;     // RMSNorm over head_dim on q and k before RoPE
    int64_t moe_intermediate_size = 1408;
    int64_t num_experts_per_tok = 8;
    int64_t n_routed_experts = 128;
    int64_t n_shared_experts = 1;
    int64_t n_group = 1;
    int64_t topk_group = 1;
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.0;
    int64_t first_k_dense_replace = 1;
    std::vector<int64_t> eos_token_id;
    std::optional<int64_t> bos_token_id;

    int64_t rotary_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor); }
    bool is_moe_layer(int64_t layer) const { return layer >= first_k_dense_replace; }

    // Parses and validates; Error kInvalidModel / kUnsupported naming the field.
    static Glm4MoeConfig from_json(const io::HfConfig& j);
};

}  // namespace moeserve::model
