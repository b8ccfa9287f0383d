#include "moeserve/model/deepseek_v3/weight_specs.h"

#include <cmath>
#include <string>

namespace moeserve::model {

namespace {
void add_mlp(std::vector<WeightSpec>& specs, const std::string& prefix, int64_t hidden, int64_t inter) {
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(hidden));
    const float out_scale = 1.0f / std::sqrt(static_cast<float>(inter));
    specs.push_back({prefix + "gate_proj.weight", {inter, hidden}, DType::kBF16, WeightInit::kNormal, in_scale});
    specs.push_back({prefix + "up_proj.weight", {inter, hidden}, DType::kBF16, WeightInit::kNormal, in_scale});
    specs.push_back({prefix + "down_proj.weight", {hidden, inter}, DType::kBF16, WeightInit::kNormal, out_scale});
}
}  // namespace

std::vector<WeightSpec> deepseek_v3_weight_specs(const DeepseekV3Config& c) {
    const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    const int64_t h = c.hidden_size;
    const int64_t heads = c.num_attention_heads;
    std::vector<WeightSpec> specs;
    specs.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, DType::kBF16, WeightInit::kNormal, 1.0f});
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        const std::string a = p + "self_attn.";
        specs.push_back({p + "input_layernorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        specs.push_back({p + "post_attention_layernorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        if (c.q_lora_rank) {
            const int64_t r = *c.q_lora_rank;
            specs.push_back({a + "q_a_proj.weight", {r, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
            specs.push_back({a + "q_a_layernorm.weight", {r}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
            specs.push_back(
                {a + "q_b_proj.weight", {heads * c.qk_head_dim(), r}, DType::kBF16, WeightInit::kNormal, inv_sqrt(r)});
        } else {
            specs.push_back(
                {a + "q_proj.weight", {heads * c.qk_head_dim(), h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        }
        specs.push_back({a + "kv_a_proj_with_mqa.weight",
                         {c.kv_lora_rank + c.qk_rope_head_dim, h},
                         DType::kBF16,
                         WeightInit::kNormal,
                         inv_sqrt(h)});
        specs.push_back({a + "kv_a_layernorm.weight", {c.kv_lora_rank}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        specs.push_back({a + "kv_b_proj.weight",
                         {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
                         DType::kBF16,
                         WeightInit::kNormal,
                         inv_sqrt(c.kv_lora_rank)});
        specs.push_back({a + "o_proj.weight",
                         {h, heads * c.v_head_dim},
                         DType::kBF16,
                         WeightInit::kNormal,
                         inv_sqrt(heads * c.v_head_dim)});
        if (c.is_moe_layer(i)) {
            const int64_t e_count = c.n_routed_experts;
            specs.push_back({p + "mlp.gate.weight", {e_count, h}, DType::kBF16, WeightInit::kNormal, 4 * inv_sqrt(h)});
            if (c.topk_method == "noaux_tc") {
                // F32 in the released checkpoints; small so it reorders only near-ties.
                specs.push_back(
                    {p + "mlp.gate.e_score_correction_bias", {e_count}, DType::kF32, WeightInit::kNormal, 0.05f});
            }
            for (int64_t e = 0; e < e_count; ++e) {
                add_mlp(specs, p + "mlp.experts." + std::to_string(e) + ".", h, c.moe_intermediate_size);
            }
            if (c.n_shared_experts > 0) {
                add_mlp(specs, p + "mlp.shared_experts.", h, c.n_shared_experts * c.moe_intermediate_size);
            }
        } else {
            add_mlp(specs, p + "mlp.", h, c.intermediate_size);
        }
    }
    specs.push_back({"model.norm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
    if (!c.tie_word_embeddings) {
        specs.push_back({"lm_head.weight", {c.vocab_size, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
    }
    return specs;
}

}  // namespace moeserve::model
