#include "moeserve/model/mixtral/config.h"

#include "moeserve/core/error.h"
#include "moeserve/model/decoder_fields.h"

namespace moeserve::model {

MixtralConfig MixtralConfig::from_json(const io::HfConfig& j) {
    MixtralConfig c;
    read_decoder_fields(j, c);
    c.rope = RopeScaling::parse(j, 1e6);
    c.num_experts_per_tok = j.get_int("num_experts_per_tok", c.num_experts_per_tok);
    c.num_local_experts = j.get_int("num_local_experts", c.num_local_experts);
    for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "num_local_experts", "num_experts_per_tok",
                            "max_position_embeddings", "sliding_window"}) {
        if (j.has(key) && j.get_int(key) < 1) j.fail(key, "a positive integer");
    }
    c.head_dim = j.get_int("head_dim", c.hidden_size / c.num_attention_heads);
    check_gqa_decoder(j, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_act);
    if (c.num_experts_per_tok > c.num_local_experts) {
        raise(ErrorCode::kInvalidModel, "{}: num_experts_per_tok ({}) must be <= num_local_experts ({})", j.label(),
              c.num_experts_per_tok, c.num_local_experts);
    }
    c.sliding_window = j.get_int("sliding_window", 0);  // null: the whole context
    c.rope_interleave = j.get_bool("rope_interleave", false);
    return c;
}

}  // namespace moeserve::model
