#include "moeserve/model/mixtral/weight_specs.h"

#include <cmath>
#include <string>

#include "moeserve/model/mixtral/model.h"
#include "moeserve/model/moe_decoder.h"

namespace moeserve::model {

std::vector<WeightSpec> mixtral_weight_specs(const MixtralConfig& c) {
    // As Qwen3-MoE's (1/sqrt(fan_in) scales), without q/k norms; the experts under Mixtral's
    // names (the decoder spec's MoeNames).
    const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    const int64_t h = c.hidden_size;
    const int64_t q_dim = c.num_attention_heads * c.head_dim;
    const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
    const auto attention = [&](std::vector<WeightSpec>& specs, int64_t, const std::string& a) {
        specs.push_back({a + "q_proj.weight", {q_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({a + "k_proj.weight", {kv_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({a + "v_proj.weight", {kv_dim, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({a + "o_proj.weight", {h, q_dim}, DType::kBF16, WeightInit::kNormal, inv_sqrt(q_dim)});
    };
    return MoeDecoder::weight_specs(MixtralModel::decoder_spec(c), false, attention);
}

}  // namespace moeserve::model
