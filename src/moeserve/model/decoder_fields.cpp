#include "moeserve/model/decoder_fields.h"

#include "moeserve/core/error.h"

namespace moeserve::model {

void check_positive(const io::HfConfig& j, std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
        if (j.has(key) && j.get_int(key) < 1) j.fail(key, "a positive integer");
    }
}

void check_gqa_decoder(const io::HfConfig& j, int64_t num_attention_heads, int64_t num_key_value_heads,
                       int64_t head_dim, const std::string& hidden_act) {
    if (head_dim < 2 || head_dim % 2 != 0) {
        raise(ErrorCode::kInvalidModel,
              "{}: head_dim (or hidden_size / num_attention_heads) must be a positive even integer; got {}", j.label(),
              head_dim);
    }
    if (num_attention_heads % num_key_value_heads != 0) {
        raise(ErrorCode::kInvalidModel, "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
              j.label(), num_attention_heads, num_key_value_heads);
    }
    if (hidden_act != "silu") {
        raise(ErrorCode::kUnsupported, "{}: hidden_act '{}' is not supported (only silu)", j.label(), hidden_act);
    }
}

}  // namespace moeserve::model
