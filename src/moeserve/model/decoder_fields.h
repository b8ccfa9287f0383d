// The config.json fields every decoder architecture has under Hugging Face's common names, read
// into any config struct with members of those names (its initializers are HF's defaults), and
// the checks they share. Each architecture's from_json reads its own fields after these.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "moeserve/io/hf_config.h"

namespace moeserve::model {

template <class Config>
void read_decoder_fields(const io::HfConfig& j, Config& c) {
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
    c.eos_token_id = j.get_int_or_list("eos_token_id");
    c.bos_token_id = j.get_optional_int("bos_token_id");
}

// Each of `keys` that is present must be a positive integer (Error naming the key and the file).
void check_positive(const io::HfConfig& j, std::initializer_list<const char*> keys);

// What every GQA decoder needs of the common fields (after check_positive, so that head_dim could
// be computed): num_attention_heads a multiple of num_key_value_heads, a positive even head size,
// and hidden_act silu (the only activation the kernels have). Error kInvalidModel / kUnsupported
// naming the file.
void check_gqa_decoder(const io::HfConfig& j, int64_t num_attention_heads, int64_t num_key_value_heads,
                       int64_t head_dim, const std::string& hidden_act);

}  // namespace moeserve::model
