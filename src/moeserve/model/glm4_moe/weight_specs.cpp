#include "moeserve/model/glm4_moe/weight_specs.h"

#include <cmath>
#include <string>

#include "moeserve/model/glm4_moe/model.h"
#include "moeserve/model/moe_decoder.h"

namespace moeserve::model {

std::vector<WeightSpec> glm4_moe_weight_specs(const Glm4MoeConfig& c) {
    // As Qwen3-MoE's (1/sqrt(fan_in) scales); q/k/v biases and q/k norms where configured, and
    // the router's score-correction bias (with_router_bias) as DeepSeek-V3's.
    const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    const int64_t h = c.hidden_size;
    const int64_t q_dim = c.num_attention_heads * c.head_dim;
    const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
    const auto attention = [&](std::vector<WeightSpec>& specs, int64_t, const std::string& a) {
        for (const auto& [proj, rows] : {std::pair{"q_proj", q_dim}, {"k_proj", kv_dim}, {"v_proj", kv_dim}}) {
            specs.push_back({a + proj + ".weight", {rows, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
            if (c.attention_bias) {
                specs.push_back({a + proj + ".bias", {rows}, DType::kBF16, WeightInit::kNormal, 0.1f});
            }
        }
        specs.push_back({a + "o_proj.weight", {h, q_dim}, DType::kBF16, WeightInit::kNormal, inv_sqrt(q_dim)});
        if (c.use_qk_norm) {
            specs.push_back({a + "q_norm.weight", {c.head_dim}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
            specs.push_back({a + "k_norm.weight", {c.head_dim}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        }
    };
    return MoeDecoder::weight_specs(Glm4MoeModel::decoder_spec(c), /*with_router_bias=*/true, attention);
}

}  // namespace moeserve::model
