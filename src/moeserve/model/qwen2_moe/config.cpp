#include "moeserve/model/qwen2_moe/config.h"

#include <algorithm>

#include "moeserve/core/error.h"
#include "moeserve/model/decoder_fields.h"

namespace moeserve::model {

Qwen2MoeConfig Qwen2MoeConfig::from_json(const io::HfConfig& j) {
    Qwen2MoeConfig c;
    read_decoder_fields(j, c);
    c.rope = RopeScaling::parse(j, 10000.0);
    c.use_sliding_window = j.get_bool("use_sliding_window", c.use_sliding_window);
    c.decoder_sparse_step = j.get_int("decoder_sparse_step", c.decoder_sparse_step);
    c.moe_intermediate_size = j.get_int("moe_intermediate_size", c.moe_intermediate_size);
    c.shared_expert_intermediate_size = j.get_int("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
    c.num_experts_per_tok = j.get_int("num_experts_per_tok", c.num_experts_per_tok);
    c.num_experts = j.get_int("num_experts", c.num_experts);
    c.norm_topk_prob = j.get_bool("norm_topk_prob", c.norm_topk_prob);
    c.mlp_only_layers = j.get_int_list("mlp_only_layers");
    check_positive(j, {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                       "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts", "num_experts_per_tok",
                       "max_position_embeddings", "decoder_sparse_step"});
    check_gqa_decoder(j, c.num_attention_heads, c.num_key_value_heads, c.head_dim(), c.hidden_act);
    if (c.hidden_size % c.num_attention_heads != 0 || c.head_dim() % 2 != 0) {
        raise(ErrorCode::kInvalidModel,
              "{}: hidden_size ({}) / num_attention_heads ({}) must be an even integer (the head size)", j.label(),
              c.hidden_size, c.num_attention_heads);
    }
    if (c.num_experts_per_tok > c.num_experts) {
        raise(ErrorCode::kInvalidModel, "{}: num_experts_per_tok ({}) must be <= num_experts ({})", j.label(),
              c.num_experts_per_tok, c.num_experts);
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
