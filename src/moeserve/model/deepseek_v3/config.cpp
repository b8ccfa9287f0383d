#include "moeserve/model/deepseek_v3/config.h"

#include <cmath>

#include "moeserve/core/error.h"

namespace moeserve::model {

namespace {
// DeepSeek-V2's Hugging Face defaults differ from V3's where the architecture changed.
void apply_v2_defaults(DeepseekV3Config& c) {
    c.vocab_size = 102400;
    c.hidden_size = 5120;
    c.intermediate_size = 12288;
    c.moe_intermediate_size = 1536;
    c.num_hidden_layers = 60;
    c.n_shared_experts = 2;
    c.n_routed_experts = 160;
    c.routed_scaling_factor = 1.0;
    c.n_group = 1;
    c.topk_group = 1;
    c.num_experts_per_tok = 6;
    c.first_k_dense_replace = 1;
    c.norm_topk_prob = false;
    c.scoring_func = "softmax";
    c.topk_method = "greedy";
    c.bos_token_id = 100000;
    c.eos_token_id = {100001};
}
}  // namespace

DeepseekV3Config DeepseekV3Config::from_json(const io::HfConfig& j) {
    DeepseekV3Config c;
    c.model_type = j.get_string("model_type", "deepseek_v3");
    if (c.model_type == "deepseek_v2") apply_v2_defaults(c);
    c.vocab_size = j.get_int("vocab_size", c.vocab_size);
    c.hidden_size = j.get_int("hidden_size", c.hidden_size);
    c.intermediate_size = j.get_int("intermediate_size", c.intermediate_size);
    c.moe_intermediate_size = j.get_int("moe_intermediate_size", c.moe_intermediate_size);
    c.num_hidden_layers = j.get_int("num_hidden_layers", c.num_hidden_layers);
    c.num_nextn_predict_layers = j.get_int("num_nextn_predict_layers", c.num_nextn_predict_layers);
    c.num_attention_heads = j.get_int("num_attention_heads", c.num_attention_heads);
    c.num_key_value_heads = j.get_int("num_key_value_heads", c.num_key_value_heads);
    c.n_shared_experts = j.get_int("n_shared_experts", c.n_shared_experts);
    c.n_routed_experts = j.get_int("n_routed_experts", c.n_routed_experts);
    c.routed_scaling_factor = j.get_float("routed_scaling_factor", c.routed_scaling_factor);
    c.kv_lora_rank = j.get_int("kv_lora_rank", c.kv_lora_rank);
    // q_lora_rank: an explicit null means "no q compression" (V2-Lite), absence means the default.
    if (j.json().contains("q_lora_rank")) c.q_lora_rank = j.get_optional_int("q_lora_rank");
    c.qk_rope_head_dim = j.get_int("qk_rope_head_dim", c.qk_rope_head_dim);
    c.v_head_dim = j.get_int("v_head_dim", c.v_head_dim);
    c.qk_nope_head_dim = j.get_int("qk_nope_head_dim", c.qk_nope_head_dim);
    c.n_group = j.get_int("n_group", c.n_group);
    c.topk_group = j.get_int("topk_group", c.topk_group);
    c.num_experts_per_tok = j.get_int("num_experts_per_tok", c.num_experts_per_tok);
    c.first_k_dense_replace = j.get_int("first_k_dense_replace", c.first_k_dense_replace);
    c.moe_layer_freq = j.get_int("moe_layer_freq", c.moe_layer_freq);
    c.norm_topk_prob = j.get_bool("norm_topk_prob", c.norm_topk_prob);
    c.scoring_func = j.get_string("scoring_func", c.scoring_func);
    c.topk_method = j.get_string("topk_method", c.topk_method);
    c.hidden_act = j.get_string("hidden_act", c.hidden_act);
    c.max_position_embeddings = j.get_int("max_position_embeddings", c.max_position_embeddings);
    c.rms_norm_eps = j.get_float("rms_norm_eps", c.rms_norm_eps);
    c.tie_word_embeddings = j.get_bool("tie_word_embeddings", c.tie_word_embeddings);
    c.attention_bias = j.get_bool("attention_bias", c.attention_bias);
    c.rope = RopeScaling::parse(j, 10000.0);
    c.rope_interleave = j.get_bool("rope_interleave", c.rope_interleave);
    if (j.json().contains("bos_token_id")) c.bos_token_id = j.get_optional_int("bos_token_id");
    if (j.has("eos_token_id")) c.eos_token_id = j.get_int_or_list("eos_token_id");

    for (const char* key :
         {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "kv_lora_rank", "qk_rope_head_dim",
          "v_head_dim", "n_routed_experts", "num_experts_per_tok", "moe_layer_freq", "n_group", "topk_group"}) {
        if (j.has(key) && j.get_int(key) < 1) j.fail(key, "a positive integer");
    }
    if (c.qk_rope_head_dim % 2 != 0) j.fail("qk_rope_head_dim", "even");
    if (c.q_lora_rank && *c.q_lora_rank < 1) j.fail("q_lora_rank", "a positive integer or null");
    if (c.num_experts_per_tok > c.n_routed_experts) {
        raise(ErrorCode::kInvalidModel, "{}: num_experts_per_tok ({}) must be <= n_routed_experts ({})", j.label(),
              c.num_experts_per_tok, c.n_routed_experts);
    }
    if (c.n_routed_experts % c.n_group != 0 || c.topk_group > c.n_group) {
        raise(ErrorCode::kInvalidModel,
              "{}: n_routed_experts ({}) must be a multiple of n_group ({}) and topk_group ({}) <= n_group", j.label(),
              c.n_routed_experts, c.n_group, c.topk_group);
    }
    if (c.scoring_func != "sigmoid" && c.scoring_func != "softmax") {
        raise(ErrorCode::kUnsupported, "{}: scoring_func '{}' is not supported (sigmoid, softmax)", j.label(),
              c.scoring_func);
    }
    if (c.topk_method != "noaux_tc" && c.topk_method != "greedy" && c.topk_method != "group_limited_greedy") {
        raise(ErrorCode::kUnsupported, "{}: topk_method '{}' is not supported (noaux_tc, greedy, group_limited_greedy)",
              j.label(), c.topk_method);
    }
    if (c.hidden_act != "silu") {
        raise(ErrorCode::kUnsupported, "{}: hidden_act '{}' is not supported (only silu)", j.label(), c.hidden_act);
    }
    return c;
}

namespace {
double mscale(double factor, double m) { return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }
}  // namespace

double DeepseekV3Config::softmax_scale() const {
    const double base = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
    if (rope.rope_type == "default" || rope.mscale_all_dim == 0.0) return base;
    const double m = mscale(rope.factor, rope.mscale_all_dim);
    return base * m * m;
}

double DeepseekV3Config::rope_attention_factor() const {
    if (rope.rope_type != "yarn") return 1.0;
    return mscale(rope.factor, rope.mscale) / mscale(rope.factor, rope.mscale_all_dim);
}

bool DeepseekV3Config::is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
}

}  // namespace moeserve::model
