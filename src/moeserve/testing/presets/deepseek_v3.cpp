// The generator's DeepSeek-V3, DeepSeek-V2 and Kimi-K2 config.json presets (moeserve make-model --arch
// deepseek_v3 | deepseek_v2 | kimi_k2).
#include "moeserve/core/error.h"
#include "moeserve/testing/presets/presets.h"

namespace moeserve::testing {

nlohmann::json deepseek_v3_preset(const std::string& model_type, const std::string& size) {
    const bool v3 = model_type != "deepseek_v2";  // kimi_k2 is DeepSeek-V3's architecture
    nlohmann::json c = {
        {"architectures", {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"}},
        {"model_type", model_type},
        {"vocab_size", 129280},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-6},
        {"rope_theta", 10000.0},
        {"attention_bias", false},
        {"tie_word_embeddings", false},
        {"bos_token_id", 0},
        {"eos_token_id", 1},
        {"torch_dtype", "bfloat16"},
        {"max_position_embeddings", 16384},
        {"rope_scaling",
         {{"type", "yarn"},
          {"factor", 4.0},
          {"original_max_position_embeddings", 4096},
          {"beta_fast", 32},
          {"beta_slow", 1},
          {"mscale", 1.0},
          {"mscale_all_dim", 1.0}}},
        {"moe_layer_freq", 1},
        {"first_k_dense_replace", 1},
        {"n_shared_experts", 1},
        {"routed_scaling_factor", v3 ? 2.5 : 1.0},
        {"norm_topk_prob", v3},
        {"scoring_func", v3 ? "sigmoid" : "softmax"},
        {"topk_method", v3 ? "noaux_tc" : "group_limited_greedy"},
    };
    if (model_type == "kimi_k2") {
        // The Kimi-style tokenizer of scripts/make_kimi_style_tokenizer.py: 128000 ranks, then 256
        // special ids ([BOS] first, <|im_end|> third).
        c.update({{"vocab_size", 128256}, {"bos_token_id", 128000}, {"eos_token_id", 128002}});
    }
    if (size == "tiny") {
        c.update({{"hidden_size", 128},
                  {"intermediate_size", 256},
                  {"moe_intermediate_size", 64},
                  {"num_hidden_layers", 3},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 4},
                  {"q_lora_rank", 64},
                  {"kv_lora_rank", 32},
                  {"qk_nope_head_dim", 32},
                  {"qk_rope_head_dim", 16},
                  {"v_head_dim", 32},
                  {"n_routed_experts", 16},
                  {"n_group", 4},
                  {"topk_group", 2},
                  {"num_experts_per_tok", 4}});
    } else if (size == "bench") {
        c.update({{"hidden_size", 1024},
                  {"intermediate_size", 3072},
                  {"moe_intermediate_size", 384},
                  {"num_hidden_layers", 12},
                  {"num_attention_heads", 16},
                  {"num_key_value_heads", 16},
                  {"q_lora_rank", 384},
                  {"kv_lora_rank", 256},
                  {"qk_nope_head_dim", 64},
                  {"qk_rope_head_dim", 32},
                  {"v_head_dim", 64},
                  {"n_routed_experts", 64},
                  {"n_group", 8},
                  {"topk_group", 4},
                  {"num_experts_per_tok", 8}});
    } else {
        raise(ErrorCode::kInvalidArgument, "unknown model size '{}' (expected tiny or bench)", size);
    }
    return c;
}

}  // namespace moeserve::testing
