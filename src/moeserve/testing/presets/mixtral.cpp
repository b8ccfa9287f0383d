// The generator's Mixtral config.json presets (moeserve make-model --arch mixtral).
#include "moeserve/core/error.h"
#include "moeserve/testing/presets/presets.h"

namespace moeserve::testing {

nlohmann::json mixtral_preset(const std::string& /*model_type*/, const std::string& size) {
    // Qwen3's vocabulary and special ids: the tokenizer the generator copies (a real Mixtral has
    // its own 32,000-token SentencePiece vocabulary).
    nlohmann::json c = {
        {"architectures", {"MixtralForCausalLM"}},
        {"model_type", "mixtral"},
        {"vocab_size", 151936},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-5},
        {"rope_theta", 1000000.0},
        {"sliding_window", nullptr},
        {"attention_dropout", 0.0},
        {"router_aux_loss_coef", 0.02},
        {"tie_word_embeddings", false},
        {"bos_token_id", 151643},
        {"eos_token_id", 151645},
        {"torch_dtype", "bfloat16"},
        {"max_position_embeddings", 32768},
    };
    if (size == "tiny") {
        c.update({{"hidden_size", 128},
                  {"intermediate_size", 96},
                  {"num_hidden_layers", 3},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2},
                  {"num_local_experts", 8},
                  {"num_experts_per_tok", 2}});
    } else if (size == "bench") {
        c.update({{"hidden_size", 1024},
                  {"intermediate_size", 1536},
                  {"num_hidden_layers", 8},
                  {"num_attention_heads", 16},
                  {"num_key_value_heads", 4},
                  {"num_local_experts", 8},
                  {"num_experts_per_tok", 2}});
    } else {
        raise(ErrorCode::kInvalidArgument, "unknown model size '{}' (expected tiny or bench)", size);
    }
    return c;
}

}  // namespace moeserve::testing
