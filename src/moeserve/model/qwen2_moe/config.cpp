#include "moeserve/model/qwen2_moe/config.h"

#include <algorithm>

#include "moeserve/core/error.h"

namespace moeserve::model {

Qwen2MoeConfig Qwen2MoeConfig::from_json(const io::HfConfig& j) {
    Qwen2MoeConfig c;
    c.vocab_size = j.get_int("vocab_size", c.vocab_size);
    c.hidden_size = j.get_int("hidden_size", c.hidden_size);
    c.intermediate_size = j.get_int("intermediate_size", c.intermediate_size);
    c.num_hidden_layers = j.get_int("num_hidden_layers", c.num_hidden_layers);
    c.num_attention_heads = j.get_int("num_attention_heads", c.num_attention_heads);
    c.num_key_value_heads = j.get_int("num_key_value_heads", c.num_key_value_heads);
    c.hidden_act = j.get_string("hidden_act", c.hidden_act);
    c.max_position_embeddings = j.get_int("max_position_embeddings", c.max_position_embeddings);
    c.rms_norm_eps = j.get_float("rms_norm_eps", c.rms_norm_eps);
    c.tie_word_embeddings = j.get_bool("tie_word_embeddings", c.tie_word_embeddings);
    c.rope = RopeScaling::parse(j, 10000.0);
    c.use_sliding_window = j.get_bool("use_sliding_window", c.use_sliding_window);
    c.decoder_sparse_step = j.get_int("decoder_sparse_step", c.decoder_sparse_step);
    c.moe_intermediate_size = j.get_int("moe_intermediate_size", c.moe_intermediate_size);
    c.shared_expert_intermediate_size = j.get_int("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
    c.num_experts_per_tok = j.get_int("num_experts_per_tok", c.num_experts_per_tok);
    c.num_experts = j.get_int("num_experts", c.num_experts);
    c.norm_topk_prob = j.get_bool("norm_topk_prob", c.norm_topk_prob);
    c.mlp_only_layers = j.get_int_list("mlp_only_layers");
    c.eos_token_id = j.get_int_or_list("eos_token_id");
    c.bos_token_id = j.get_optional_int("bos_token_id");
    for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "moe_intermediate_size", "shared_expert_intermediate_size",
                            "num_experts", "num_experts_per_tok", "max_position_embeddings", "decoder_sparse_step"}) {
        if (j.has(key) && j.get_int(key) < 1) j.fail(key, "a positive integer");
    }
    if (c.hidden_size % c.num_attention_heads != 0 || c.head_dim() % 2 != 0) {
        raise(ErrorCode::kInvalidModel,
              "{}: hidden_size ({}) / num_attention_heads ({}) must be an even integer (the head size)", j.label(),
              c.hidden_size, c.num_attention_heads);
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0) {
        raise(ErrorCode::kInvalidModel, "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
              j.label(), c.num_attention_heads, c.num_key_value_heads);
    }
    if (c.num_experts_per_tok > c.num_experts) {
        raise(ErrorCode::kInvalidModel, "{}: num_experts_per_tok ({}) must be <= num_experts ({})", j.label(),
              c.num_experts_per_tok, c.num_experts);
    }
    if (c.hidden_act != "silu") {
        raise(ErrorCode::kUnsupported, "{}: hidden_act '{}' is not supported (only silu)", j.label(), c.hidden_act);
    }
    if (c.use_sliding_window) {
        raise(ErrorCode::kUnsupported, "{}: use_sliding_window=true is not supported", j.label());
    }
    return c;
}

bool Qwen2MoeConfig::is_moe_layer(int64_t layer) const {
    const bool dense_only = std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end();
    return !dense_only && num_experts > 0 && (layer + 1) % decoder_sparse_step == 0;
}

}  // namespace moeserve::model
