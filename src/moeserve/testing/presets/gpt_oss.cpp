// The generator's gpt-oss config.json presets (moeserve make-model --arch gpt_oss).
#include "moeserve/core/error.h"
#include "moeserve/testing/presets/presets.h"

namespace moeserve::testing {

nlohmann::json gpt_oss_preset(const std::string& /*model_type*/, const std::string& size) {
    // gpt-oss's o200k_harmony vocabulary and special ids (the gpt_oss tokenizer setup derives:
    // <|startoftext|> 199998, <|endoftext|> 199999, <|return|> 200002, <|call|> 200012, which must
    // stop generation so that a tool call ends), its YaRN (factor 32 over 4096 positions,
    // fractional correction range) and layer pattern (sliding, full, ...) as released.
    nlohmann::json c = {
        {"architectures", {"GptOssForCausalLM"}},
        {"model_type", "gpt_oss"},
        {"vocab_size", 201088},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-5},
        {"rope_theta", 150000.0},
        {"rope_scaling",
         {{"rope_type", "yarn"},
          {"factor", 32.0},
          {"beta_fast", 32.0},
          {"beta_slow", 1.0},
          {"truncate", false},
          {"original_max_position_embeddings", 4096}}},
        {"attention_bias", true},
        {"attention_dropout", 0.0},
        {"router_aux_loss_coef", 0.9},
        {"tie_word_embeddings", false},
        {"bos_token_id", 199998},
        {"eos_token_id", {200002, 199999, 200012}},
        {"pad_token_id", 199999},
        {"torch_dtype", "bfloat16"},
        {"max_position_embeddings", 131072},
    };
    if (size == "tiny") {
        // A window of 5 so that the reference prompt (19 tokens) slides; a limit of 2 so that the
        // clamps bite on unit-size activations (the released models use 128 and 7).
        c.update({{"hidden_size", 128},
                  {"intermediate_size", 96},
                  {"num_hidden_layers", 3},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2},
                  {"head_dim", 32},
                  {"sliding_window", 5},
                  {"swiglu_limit", 2.0},
                  {"layer_types", {"sliding_attention", "full_attention", "sliding_attention"}},
                  {"num_local_experts", 8},
                  {"num_experts_per_tok", 2}});
    } else if (size == "bench") {
        c.update({{"hidden_size", 1024},
                  {"intermediate_size", 512},
                  {"num_hidden_layers", 8},
                  {"num_attention_heads", 16},
                  {"num_key_value_heads", 4},
                  {"head_dim", 64},
                  {"sliding_window", 128},
                  {"swiglu_limit", 7.0},
                  {"num_local_experts", 32},
                  {"num_experts_per_tok", 4}});
    } else {
        raise(ErrorCode::kInvalidArgument, "unknown model size '{}' (expected tiny or bench)", size);
    }
    return c;
}

}  // namespace moeserve::testing
