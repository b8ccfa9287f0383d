// The generator's Qwen3-MoE config.json presets (moeserve make-model --arch qwen3_moe).
#include "moeserve/core/error.h"
#include "moeserve/testing/presets/presets.h"

namespace moeserve::testing {

nlohmann::json qwen3_moe_preset(const std::string& /*model_type*/, const std::string& size) {
    nlohmann::json c = {
        {"architectures", {"Qwen3MoeForCausalLM"}},
        {"model_type", "qwen3_moe"},
        {"vocab_size", 151936},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000.0},
        {"rope_scaling", nullptr},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        {"use_sliding_window", false},
        {"decoder_sparse_step", 1},
        {"norm_topk_prob", true},
        {"tie_word_embeddings", false},
        {"bos_token_id", 151643},
        {"eos_token_id", 151645},
        {"torch_dtype", "bfloat16"},
        {"max_position_embeddings", 40960},
    };
    if (size == "tiny") {
        // head_dim 64 != hidden/heads (32): exercises the explicit head_dim; layer 1 is dense.
        c.update({{"hidden_size", 128},
                  {"intermediate_size", 256},
                  {"num_hidden_layers", 3},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2},
                  {"head_dim", 64},
                  {"num_experts", 8},
                  {"num_experts_per_tok", 2},
                  {"moe_intermediate_size", 64},
                  {"mlp_only_layers", {1}}});
    } else if (size == "bench") {
        // The bench size of the targets: hidden 1024, 12 layers, 64 experts top-8, moe_inter 384.
        c.update({{"hidden_size", 1024},
                  {"intermediate_size", 3072},
                  {"num_hidden_layers", 12},
                  {"num_attention_heads", 16},
                  {"num_key_value_heads", 4},
                  {"head_dim", 128},
                  {"num_experts", 64},
                  {"num_experts_per_tok", 8},
                  {"moe_intermediate_size", 384},
                  {"mlp_only_layers", nlohmann::json::array()}});
    } else {
        raise(ErrorCode::kInvalidArgument, "unknown model size '{}' (expected tiny or bench)", size);
    }
    return c;
}

}  // namespace moeserve::testing
