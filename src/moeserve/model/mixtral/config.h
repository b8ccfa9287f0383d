// Mixtral configuration (model_type "mixtral", MixtralForCausalLM): config.json field names
// verbatim, Hugging Face defaults for missing fields, validated once in from_json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/io/hf_config.h"
#include "moeserve/model/layers/rope_scaling.h"

namespace moeserve::model {

struct MixtralConfig {
    int64_t vocab_size = 32000;
    int64_t hidden_size = 4096;
    int64_t intermediate_size = 14336;  // each expert's (Mixtral has no dense layers)
    int64_t num_hidden_layers = 32;
    int64_t num_attention_heads = 32;
    int64_t num_key_value_heads = 8;
    int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
    std::string hidden_act = "silu";
    int64_t max_position_embeddings = 4096 * 32;
    double rms_norm_eps = 1e-5;
    bool tie_word_embeddings = false;
    RopeScaling rope;  // rope_theta (default 1e6) and rope_scaling
    int64_t num_experts_per_tok = 2;
    int64_t num_local_experts = 8;
    int64_t sliding_window = 0;  // 0: null (the released checkpoints); else every layer slides
    // Not a Hugging Face field: q/k rows in llama.cpp's adjacent-pair order (a llama GGUF's
    // config, formats/gguf_llama.cpp), so RoPE rotates adjacent pairs.
    bool rope_interleave = false;
    std::vector<int64_t> eos_token_id;
    std::optional<int64_t> bos_token_id;

    // Parses and validates; Error kInvalidModel / kUnsupported naming the field.
    static MixtralConfig from_json(const io::HfConfig& j);
};

}  // namespace moeserve::model
