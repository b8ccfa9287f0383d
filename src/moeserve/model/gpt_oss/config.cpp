#include "moeserve/model/gpt_oss/config.h"

#include "moeserve/core/error.h"
#include "moeserve/model/decoder_fields.h"

namespace moeserve::model {

namespace {

// layer_types as listed, or HF's default: sliding on even layers, full on odd ones.
std::vector<std::string> read_layer_types(const io::HfConfig& j, int64_t num_layers) {
    std::vector<std::string> types;
    types.reserve(static_cast<size_t>(num_layers));
    if (!j.has("layer_types")) {
        for (int64_t i = 0; i < num_layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
        return types;
    }
    const nlohmann::json& list = j.json().at("layer_types");
    if (!list.is_array() || static_cast<int64_t>(list.size()) != num_layers) {
        j.fail("layer_types", "a list of num_hidden_layers strings");
    }
    for (const nlohmann::json& t : list) {
        if (!t.is_string() || (t != "sliding_attention" && t != "full_attention")) {
            j.fail("layer_types", "entries \"sliding_attention\" or \"full_attention\"");
        }
        types.push_back(t.get<std::string>());
    }
    return types;
}

}  // namespace

GptOssConfig GptOssConfig::from_json(const io::HfConfig& j) {
    GptOssConfig c;
    read_decoder_fields(j, c);
    c.rope = RopeScaling::parse(j, 150000.0);
    c.head_dim = j.get_int("head_dim", c.head_dim);
    c.num_local_experts = j.get_int("num_local_experts", c.num_local_experts);
    c.num_experts_per_tok = j.get_int("num_experts_per_tok", c.num_experts_per_tok);
    c.sliding_window = j.get_int("sliding_window", c.sliding_window);
    c.swiglu_limit = j.get_float("swiglu_limit", c.swiglu_limit);
    c.attention_bias = j.get_bool("attention_bias", c.attention_bias);
    check_positive(j, {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                       "num_key_value_heads", "head_dim", "num_local_experts", "num_experts_per_tok",
                       "max_position_embeddings", "sliding_window"});
    check_gqa_decoder(j, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_act);
    if (c.num_experts_per_tok > c.num_local_experts) {
        raise(ErrorCode::kInvalidModel, "{}: num_experts_per_tok ({}) must be <= num_local_experts ({})", j.label(),
              c.num_experts_per_tok, c.num_local_experts);
    }
    if (!(c.swiglu_limit > 0.0)) j.fail("swiglu_limit", "a positive number");
    if (!c.attention_bias) j.fail("attention_bias", "true (gpt-oss's projections have biases)");
    c.layer_types = read_layer_types(j, c.num_hidden_layers);
    return c;
}

std::vector<int64_t> GptOssConfig::layer_windows() const {
    std::vector<int64_t> windows;
    windows.reserve(layer_types.size());
    for (const std::string& t : layer_types) windows.push_back(t == "sliding_attention" ? sliding_window : 0);
    return windows;
}

}  // namespace moeserve::model
