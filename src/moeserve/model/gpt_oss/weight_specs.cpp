#include "moeserve/model/gpt_oss/weight_specs.h"

#include <cmath>
#include <string>

#include "moeserve/model/gpt_oss/experts.h"
#include "moeserve/model/gpt_oss/model.h"
#include "moeserve/model/moe_decoder.h"

namespace moeserve::model {

std::vector<WeightSpec> gpt_oss_weight_specs(const GptOssConfig& c) {
    // 1/sqrt(fan_in) scales as Qwen3-MoE's; biases small; sinks near the scores' own size, so
    // that they take a visible share of each softmax.
    const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    const int64_t h = c.hidden_size, inter = c.intermediate_size, e = c.num_local_experts;
    const int64_t q_dim = c.num_attention_heads * c.head_dim;
    const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
    const auto attention = [&](std::vector<WeightSpec>& specs, int64_t, const std::string& a) {
        const auto projection = [&](const std::string& name, int64_t out, int64_t in) {
            specs.push_back({a + name + ".weight", {out, in}, DType::kBF16, WeightInit::kNormal, inv_sqrt(in)});
            specs.push_back({a + name + ".bias", {out}, DType::kBF16, WeightInit::kNormal, 0.05f});
        };
        projection("q_proj", q_dim, h);
        projection("k_proj", kv_dim, h);
        projection("v_proj", kv_dim, h);
        projection("o_proj", h, q_dim);
        specs.push_back({a + "sinks", {c.num_attention_heads}, DType::kBF16, WeightInit::kNormal, 1.0f});
    };
    std::vector<WeightSpec> specs =
        MoeDecoder::weight_specs(GptOssModel::decoder_spec(c), /*with_router_bias=*/true, attention);
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
        const std::string p = "model.layers." + std::to_string(layer) + "." + gpt_oss::kExperts;
        specs.push_back({p + "gate_up_proj", {e, h, 2 * inter}, DType::kBF16, WeightInit::kNormal, inv_sqrt(h)});
        specs.push_back({p + "gate_up_proj_bias", {e, 2 * inter}, DType::kBF16, WeightInit::kNormal, 0.05f});
        specs.push_back({p + "down_proj", {e, inter, h}, DType::kBF16, WeightInit::kNormal, inv_sqrt(inter)});
        specs.push_back({p + "down_proj_bias", {e, h}, DType::kBF16, WeightInit::kNormal, 0.05f});
    }
    return specs;
}

}  // namespace moeserve::model
