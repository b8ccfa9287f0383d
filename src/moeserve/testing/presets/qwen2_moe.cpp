// The generator's Qwen2-MoE config.json presets (moeserve make-model --arch qwen2_moe).
#include "moeserve/core/error.h"
#include "moeserve/testing/presets/presets.h"

namespace moeserve::testing {

nlohmann::json qwen2_moe_preset(const std::string& /*model_type*/, const std::string& size) {
    nlohmann::json c = {
        {"architectures", {"Qwen2MoeForCausalLM"}},
        {"model_type", "qwen2_moe"},
        {"vocab_size", 151936},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000.0},
        {"use_sliding_window", false},
        {"decoder_sparse_step", 1},
        {"norm_topk_prob", false},
        {"tie_word_embeddings", false},
        {"bos_token_id", 151643},
        {"eos_token_id", 151645},
        {"torch_dtype", "bfloat16"},
        {"max_position_embeddings", 8192},
    };
    if (size == "tiny") {  // layer 1 dense: both block kinds
        c.update({{"hidden_size", 128},
                  {"intermediate_size", 256},
                  {"num_hidden_layers", 3},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2},
                  {"num_experts", 8},
                  {"num_experts_per_tok", 2},
                  {"moe_intermediate_size", 64},
                  {"shared_expert_intermediate_size", 128},
                  {"mlp_only_layers", {1}}});
    } else if (size == "bench") {
        c.update({{"hidden_size", 1024},
                  {"intermediate_size", 2816},
                  {"num_hidden_layers", 12},
                  {"num_attention_heads", 16},
                  {"num_key_value_heads", 16},
                  {"num_experts", 60},
                  {"num_experts_per_tok", 4},
                  {"moe_intermediate_size", 352},
                  {"shared_expert_intermediate_size", 1408},
                  {"mlp_only_layers", nlohmann::json::array()}});
    } else {
        raise(ErrorCode::kInvalidArgument, "unknown model size '{}' (expected tiny or bench)", size);
    }
    return c;
}

}  // namespace moeserve::testing
