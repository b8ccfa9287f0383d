#include "moeserve/model/glm4_moe/config.h"

#include "moeserve/core/error.h"
#include "moeserve/model/decoder_fields.h"

namespace moeserve::model {

Glm4MoeConfig Glm4MoeConfig::from_json(const io::HfConfig& j) {
    Glm4MoeConfig c;
    read_decoder_fields(j, c);
    c.partial_rotary_factor = j.get_float("partial_rotary_factor", c.partial_rotary_factor);
    c.rope = RopeScaling::parse(j, 10000.0);
    c.attention_bias = j.get_bool("attention_bias", c.attention_bias);
    c.use_qk_norm = j.get_bool("use_qk_norm", c.use_qk_norm);
    c.moe_intermediate_size = j.get_int("moe_intermediate_size", c.moe_intermediate_size);
    c.num_experts_per_tok = j.get_int("num_experts_per_tok", c.num_experts_per_tok);
    c.n_routed_experts = j.get_int("n_routed_experts", c.n_routed_experts);
    c.n_shared_experts = j.get_int("n_shared_experts", c.n_shared_experts);
    c.n_group = j.get_int("n_group", c.n_group);
    c.topk_group = j.get_int("topk_group", c.topk_group);
    c.norm_topk_prob = j.get_bool("norm_topk_prob", c.norm_topk_prob);
    c.routed_scaling_factor = j.get_float("routed_scaling_factor", c.routed_scaling_factor);
    c.first_k_dense_replace = j.get_int("first_k_dense_replace", c.first_k_dense_replace);
    check_positive(j, {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                       "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "max_position_embeddings",
                       "n_group", "topk_group"});
    c.head_dim = j.get_int("head_dim", c.hidden_size / c.num_attention_heads);
    check_gqa_decoder(j, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_act);
    const int64_t rot = c.rotary_dim();
    if (c.head_dim < 2 || rot < 2 || rot % 2 != 0 || rot > c.head_dim) {
        raise(ErrorCode::kInvalidModel,
              "{}: head_dim ({}) x partial_rotary_factor ({}) must be an even number of dims within the head; got {}",
              j.label(), c.head_dim, c.partial_rotary_factor, rot);
    }
    if (c.n_routed_experts % c.n_group != 0 || c.topk_group > c.n_group ||
        c.num_experts_per_tok > c.n_routed_experts / c.n_group * c.topk_group) {
        raise(ErrorCode::kInvalidModel,
              "{}: n_routed_experts ({}) must split into n_group ({}) groups, topk_group ({}) of which hold "
              "num_experts_per_tok ({}) experts",
              j.label(), c.n_routed_experts, c.n_group, c.topk_group, c.num_experts_per_tok);
    }
    return c;
}

}  // namespace moeserve::model
