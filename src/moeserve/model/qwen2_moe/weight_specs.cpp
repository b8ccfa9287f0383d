#include "moeserve/model/qwen2_moe/weight_specs.h"

#include <cmath>
#include <string>

#include "moeserve/model/moe_decoder.h"
#include "moeserve/model/qwen2_moe/model.h"

namespace moeserve::model {

std::vector<WeightSpec> qwen2_moe_weight_specs(const Qwen2MoeConfig& c) {
    // As Qwen3-MoE's (1/sqrt(fan_in) scales): q/k/v with biases, o without, no q/k norms.
    const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    const int64_t h = c.hidden_size;
    const int64_t q_dim = c.num_attention_heads * c.head_dim();
    const int64_t kv_dim = c.num_key_value_heads * c.head_dim();
    const auto attention = [&](std::vector<WeightSpec>& specs, int64_t, const std::string& a) {
        specs.push_back({a + "q_proj.weight", {q_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({a + "q_proj.bias", {q_dim}, DType::kBF16, WeightInit::kNormal, 0.1f});
        specs.push_back({a + "k_proj.weight", {kv_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({a + "k_proj.bias", {kv_dim}, DType::kBF16, WeightInit::kNormal, 0.1f});
        specs.push_back({a + "v_proj.weight", {kv_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({a + "v_proj.bias", {kv_dim}, DType::kBF16, WeightInit::kNormal, 0.1f});
        specs.push_back({a + "o_proj.weight", {h, q_dim}, DType::kBF16, WeightInit::kNormal, inv_sqrt(q_dim)});
    };
    return MoeDecoder::weight_specs(Qwen2MoeModel::decoder_spec(c), false, attention);
}

}  // namespace moeserve::model
