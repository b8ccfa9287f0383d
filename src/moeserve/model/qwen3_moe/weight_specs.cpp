#include "moeserve/model/qwen3_moe/weight_specs.h"

#include <cmath>
#include <string>

namespace moeserve::model {

std::vector<WeightSpec> qwen3_moe_weight_specs(const Qwen3MoeConfig& c) {
    // Scales keep activations near unit size through the layers (1/sqrt(fan_in)), so logits are
    // O(1) and greedy choices are decisive; the router is 4x sharper so top-k has clear gaps.
    const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    const int64_t h = c.hidden_size;
    const int64_t q_dim = c.num_attention_heads * c.head_dim;
    const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
    std::vector<WeightSpec> specs;
    specs.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, DType::kBF16, WeightInit::kNormal, 1.0f});
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        specs.push_back({p + "input_layernorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        specs.push_back({p + "post_attention_layernorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        specs.push_back({p + "self_attn.q_proj.weight", {q_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({p + "self_attn.k_proj.weight", {kv_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({p + "self_attn.v_proj.weight", {kv_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        if (c.attention_bias) {
            specs.push_back({p + "self_attn.q_proj.bias", {q_dim}, DType::kBF16, WeightInit::kNormal, 0.1f});
            specs.push_back({p + "self_attn.k_proj.bias", {kv_dim}, DType::kBF16, WeightInit::kNormal, 0.1f});
            specs.push_back({p + "self_attn.v_proj.bias", {kv_dim}, DType::kBF16, WeightInit::kNormal, 0.1f});
        }
        specs.push_back(
            {p + "self_attn.o_proj.weight", {h, q_dim}, DType::kBF16, WeightInit::kNormal, inv_sqrt(q_dim)});
        specs.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        specs.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        if (c.is_moe_layer(i)) {
            const int64_t m = c.moe_intermediate_size;
            specs.push_back(
                {p + "mlp.gate.weight", {c.num_experts, h}, DType::kBF16, WeightInit::kNormal, 4 * inv_sqrt(h)});
            for (int64_t e = 0; e < c.num_experts; ++e) {
                const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
                specs.push_back({x + "gate_proj.weight", {m, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
                specs.push_back({x + "up_proj.weight", {m, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
                specs.push_back({x + "down_proj.weight", {h, m}, DType::kBF16, WeightInit::kNormal, inv_sqrt(m)});
            }
        } else {
            const int64_t m = c.intermediate_size;
            specs.push_back({p + "mlp.gate_proj.weight", {m, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
            specs.push_back({p + "mlp.up_proj.weight", {m, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
            specs.push_back({p + "mlp.down_proj.weight", {h, m}, DType::kBF16, WeightInit::kNormal, inv_sqrt(m)});
        }
    }
    specs.push_back({"model.norm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
    if (!c.tie_word_embeddings) {
        specs.push_back({"lm_head.weight", {c.vocab_size, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
    }
    return specs;
}

}  // namespace moeserve::model
