#include "moeserve/model/mixtral/config.h"

#include "moeserve/core/error.h"

namespace moeserve::model {

MixtralConfig MixtralConfig::from_json(const io::HfConfig& j) {
    MixtralConfig c;
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
    c.rope = RopeScaling::parse(j, 1e6);
    c.num_experts_per_tok = j.get_int("num_experts_per_tok", c.num_experts_per_tok);
    c.num_local_experts = j.get_int("num_local_experts", c.num_local_experts);
    c.eos_token_id = j.get_int_or_list("eos_token_id");
    c.bos_token_id = j.get_optional_int("bos_token_id");
    for (const char* key :
         {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "num_local_experts", "num_experts_per_tok", "max_position_embeddings"}) {
        if (j.has(key) && j.get_int(key) < 1) j.fail(key, "a positive integer");
    }
    c.head_dim = j.get_int("head_dim", c.hidden_size / c.num_attention_heads);
    if (c.head_dim < 2 || c.head_dim % 2 != 0) {
        raise(ErrorCode::kInvalidModel,
              "{}: head_dim (or hidden_size / num_attention_heads) must be a positive even integer; got {}", j.label(),
              c.head_dim);
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0) {
        raise(ErrorCode::kInvalidModel, "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
              j.label(), c.num_attention_heads, c.num_key_value_heads);
    }
    if (c.num_experts_per_tok > c.num_local_experts) {
        raise(ErrorCode::kInvalidModel, "{}: num_experts_per_tok ({}) must be <= num_local_experts ({})", j.label(),
              c.num_experts_per_tok, c.num_local_experts);
    }
    if (c.hidden_act != "silu") {
        raise(ErrorCode::kUnsupported, "{}: hidden_act '{}' is not supported (only silu)", j.label(), c.hidden_act);
    }
    if (j.has("sliding_window")) {  // present and not null
        raise(ErrorCode::kUnsupported,
              "{}: sliding_window {} is not supported: moeserve attends over the whole context (Mixtral's "
              "released checkpoints ship null)",
              j.label(), j.get_int("sliding_window"));
    }
    return c;
}

}  // namespace moeserve::model
