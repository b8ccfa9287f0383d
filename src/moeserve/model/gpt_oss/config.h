// gpt-oss configuration (model_type "gpt_oss", GptOssForCausalLM): config.json field names
// verbatim, Hugging Face's defaults for missing fields, validated once in from_json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/io/hf_config.h"
#include "moeserve/model/layers/rope_scaling.h"

namespace moeserve::model {

struct GptOssConfig {
    int64_t vocab_size = 201088;
    int64_t hidden_size = 2880;
    int64_t intermediate_size = 2880;  // each expert's (gpt-oss has no dense layers)
    int64_t num_hidden_layers = 36;
    int64_t num_attention_heads = 64;
    int64_t num_key_value_heads = 8;
    int64_t head_dim = 64;
    std::string hidden_act = "silu";
    int64_t max_position_embeddings = 131072;
    double rms_norm_eps = 1e-5;
    bool tie_word_embeddings = false;
    RopeScaling rope;  // rope_theta (default 150000) and the YaRN rope_scaling
    int64_t num_local_experts = 128;
    int64_t num_experts_per_tok = 4;
    int64_t sliding_window = 128;
    double swiglu_limit = 7.0;
    bool attention_bias = true;
    // Per layer "sliding_attention" or "full_attention"; HF's default alternates from sliding.
    std::vector<std::string> layer_types;
    std::vector<int64_t> eos_token_id;
    std::optional<int64_t> bos_token_id;

    // HF's GptOssExperts: sigmoid(alpha * gate), a constant of the architecture (not in config.json).
    static constexpr float kGluAlpha = 1.702f;

    // Parses and validates; Error kInvalidModel / kUnsupported naming the field.
    static GptOssConfig from_json(const io::HfConfig& j);
    // The sliding window of each layer: sliding_window on the sliding layers, 0 on the full ones.
    std::vector<int64_t> layer_windows() const;
};

}  // namespace moeserve::model
