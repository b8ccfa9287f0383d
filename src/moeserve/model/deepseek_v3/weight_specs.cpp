#include "moeserve/model/deepseek_v3/weight_specs.h"

#include <cmath>
#include <string>

#include "moeserve/model/deepseek_v3/model.h"
#include "moeserve/model/moe_decoder.h"

namespace moeserve::model {

std::vector<WeightSpec> deepseek_v3_weight_specs(const DeepseekV3Config& c) {
    // The embedding, norms, MoE block (with noaux_tc's F32 score-correction bias, as in the
    // released checkpoints) and lm_head are the decoder's (MoeDecoder::weight_specs); the MLA
    // attention is this architecture's. Scales are 1/sqrt(fan_in).
    const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    const int64_t h = c.hidden_size;
    const int64_t heads = c.num_attention_heads;
    const auto attention = [&](std::vector<WeightSpec>& specs, int64_t, const std::string& a) {
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
        // absorbed into the attention: runs dequantized, though quantized checkpoints store it in 8 bits
        specs.push_back({a + "kv_b_proj.weight",
                         {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
                         DType::kBF16,
                         WeightInit::kNormal,
                         inv_sqrt(c.kv_lora_rank),
                         LayerPrecision::kDequantized});
        specs.push_back({a + "o_proj.weight",
                         {h, heads * c.v_head_dim},
                         DType::kBF16,
                         WeightInit::kNormal,
                         inv_sqrt(heads * c.v_head_dim)});
    };
    const DecoderSpec spec = DeepseekV3Model::decoder_spec(c);
    const bool router_bias = c.topk_method == "noaux_tc";
    std::vector<WeightSpec> specs = MoeDecoder::weight_specs(spec, router_bias, attention);
    // DeepSeek-V3's MTP layer (the draft head), when config.json has one; later ones are not read
    if (c.num_nextn_predict_layers > 0) MoeDecoder::draft_head_specs(specs, spec, router_bias, attention);
    return specs;
}

}  // namespace moeserve::model
