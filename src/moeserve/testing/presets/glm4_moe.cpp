// The generator's GLM-4.5 config.json presets (moeserve make-model --arch glm4_moe).
#include "moeserve/core/error.h"
#include "moeserve/testing/presets/presets.h"

namespace moeserve::testing {

nlohmann::json glm4_moe_preset(const std::string& /*model_type*/, const std::string& size) {
    // GLM-4.5's structure (partial RoPE, q/k/v biases, sigmoid grouped routing with the correction
    // bias, a shared expert, a dense first layer) on Qwen3's vocabulary: the generator's tokenizer.
    nlohmann::json c = {
        {"architectures", {"Glm4MoeForCausalLM"}},
        {"model_type", "glm4_moe"},
        {"vocab_size", 151936},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-5},
        {"rope_theta", 1000000.0},
        {"partial_rotary_factor", 0.5},
        {"attention_bias", true},
        {"use_qk_norm", true},
        {"norm_topk_prob", true},
        {"routed_scaling_factor", 2.5},
        {"first_k_dense_replace", 1},
        {"tie_word_embeddings", false},
        {"bos_token_id", 151643},
        {"eos_token_id", 151645},
        {"torch_dtype", "bfloat16"},
        {"max_position_embeddings", 8192},
    };
    if (size == "tiny") {
        c.update({{"hidden_size", 128},
                  {"intermediate_size", 256},
                  {"num_hidden_layers", 3},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2},
                  {"head_dim", 64},
                  {"n_routed_experts", 8},
                  {"n_shared_experts", 1},
                  {"num_experts_per_tok", 2},
                  {"n_group", 4},
                  {"topk_group", 2},
                  {"moe_intermediate_size", 64}});
    } else if (size == "bench") {
        c.update({{"hidden_size", 1024},
                  {"intermediate_size", 3072},
                  {"num_hidden_layers", 12},
                  {"num_attention_heads", 16},
                  {"num_key_value_heads", 4},
                  {"head_dim", 128},
                  {"n_routed_experts", 64},
                  {"n_shared_experts", 1},
                  {"num_experts_per_tok", 8},
                  {"n_group", 1},
                  {"topk_group", 1},
                  {"moe_intermediate_size", 384}});
    } else {
        raise(ErrorCode::kInvalidArgument, "unknown model size '{}' (expected tiny or bench)", size);
    }
    return c;
}

}  // namespace moeserve::testing
