// Qwen2-MoE configuration (model_type "qwen2_moe", Qwen2MoeForCausalLM; Qwen1.5-MoE too):
// config.json field names verbatim, Hugging Face defaults for missing fields, validated once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/io/hf_config.h"
#include "moeserve/model/layers/rope_scaling.h"

namespace moeserve::model {

struct Qwen2MoeConfig {
    int64_t vocab_size = 151936;
    int64_t hidden_size = 2048;
    int64_t intermediate_size = 5632;  // dense MLP layers
    int64_t num_hidden_layers = 24;
    int64_t num_attention_heads = 16;
    int64_t num_key_value_heads = 16;
    std::string hidden_act = "silu";
    int64_t max_position_embeddings = 32768;
    double rms_norm_eps = 1e-6;
    bool tie_word_embeddings = false;
    RopeScaling rope;  // rope_theta (default 10000) and rope_scaling
    bool use_sliding_window = false;
    int64_t decoder_sparse_step = 1;
    int64_t moe_intermediate_size = 1408;
    int64_t shared_expert_intermediate_size = 5632;
    int64_t num_experts_per_tok = 4;
    int64_t num_experts = 60;
    bool norm_topk_prob = false;
    std::vector<int64_t> mlp_only_layers;
    std::vector<int64_t> eos_token_id;
    std::optional<int64_t> bos_token_id;

    int64_t head_dim() const { return hidden_size / num_attention_heads; }

    // Parses and validates; Error kInvalidModel / kUnsupported naming the field.
    static Qwen2MoeConfig from_json(const io::HfConfig& j);
    // Sparse MoE block on this layer (else a dense MLP of intermediate_size), as HF decides it.
    bool is_moe_layer(int64_t layer) const;
};

}  // namespace moeserve::model
