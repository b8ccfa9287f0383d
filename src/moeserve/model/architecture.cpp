#include "moeserve/model/architecture.h"

#include "moeserve/model/deepseek_v3/model.h"
#include "moeserve/model/deepseek_v3/weight_specs.h"
#include "moeserve/model/glm4_moe/model.h"
#include "moeserve/model/gpt_oss/model.h"
#include "moeserve/model/gpt_oss/weight_specs.h"
#include "moeserve/model/glm4_moe/weight_specs.h"
#include "moeserve/model/mixtral/model.h"
#include "moeserve/model/mixtral/weight_specs.h"
#include "moeserve/model/qwen2_moe/model.h"
#include "moeserve/model/qwen2_moe/weight_specs.h"
#include "moeserve/model/qwen3_moe/model.h"
#include "moeserve/model/qwen3_moe/weight_specs.h"

namespace moeserve::model {

namespace {

std::vector<WeightSpec> qwen3_moe_specs(const io::HfConfig& c) {
    return qwen3_moe_weight_specs(Qwen3MoeConfig::from_json(c));
}
std::vector<WeightSpec> qwen2_moe_specs(const io::HfConfig& c) {
    return qwen2_moe_weight_specs(Qwen2MoeConfig::from_json(c));
}
std::vector<WeightSpec> glm4_moe_specs(const io::HfConfig& c) {
    return glm4_moe_weight_specs(Glm4MoeConfig::from_json(c));
}
std::vector<WeightSpec> mixtral_specs(const io::HfConfig& c) {
    return mixtral_weight_specs(MixtralConfig::from_json(c));
}
std::vector<WeightSpec> gpt_oss_specs(const io::HfConfig& c) {
    return gpt_oss_weight_specs(GptOssConfig::from_json(c));
}
std::vector<WeightSpec> deepseek_specs(const io::HfConfig& c) {
    return deepseek_v3_weight_specs(DeepseekV3Config::from_json(c));
}

}  // namespace

const std::vector<Architecture>& architectures() {
    // model_type, weight_specs, load, load_weights
    static const std::vector<Architecture> table = {
        {"qwen3_moe", &qwen3_moe_specs, &Qwen3MoeModel::load, &Qwen3MoeModel::load_weights},
        {"qwen2_moe", &qwen2_moe_specs, &Qwen2MoeModel::load, &Qwen2MoeModel::load_weights},
        {"glm4_moe", &glm4_moe_specs, &Glm4MoeModel::load, &Glm4MoeModel::load_weights},
        {"mixtral", &mixtral_specs, &MixtralModel::load, &MixtralModel::load_weights},
        {"gpt_oss", &gpt_oss_specs, &GptOssModel::load, &GptOssModel::load_weights},
        {"deepseek_v3", &deepseek_specs, &DeepseekV3Model::load, &DeepseekV3Model::load_weights},
        {"deepseek_v2", &deepseek_specs, &DeepseekV3Model::load},
        // Kimi-K2: DeepSeek-V3's architecture under its own model_type (and a tiktoken tokenizer)
        {"kimi_k2", &deepseek_specs, &DeepseekV3Model::load, &DeepseekV3Model::load_weights},
    };
    return table;
}

const Architecture* find_architecture(const std::string& model_type) {
    for (const Architecture& a : architectures()) {
        if (a.model_type == model_type) return &a;
    }
    return nullptr;
}

}  // namespace moeserve::model
