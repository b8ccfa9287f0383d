#include "moeserve/model/architecture.h"

#include "moeserve/model/deepseek_v3/model.h"
#include "moeserve/model/deepseek_v3/weight_specs.h"
#include "moeserve/model/generator_mindformers.h"
#include "moeserve/model/glm4_moe/model.h"
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
std::vector<WeightSpec> deepseek_specs(const io::HfConfig& c) {
    return deepseek_v3_weight_specs(DeepseekV3Config::from_json(c));
}
void deepseek_mindformers(const std::vector<WeightSpec>& specs, const io::HfConfig& c, uint64_t seed,
                          const gen::TensorSource& source, int num_shards, const std::filesystem::path& out_dir,
                          GeneratedModel& result) {
    gen::write_mindformers_a8w8(specs, DeepseekV3Config::from_json(c), seed, source, num_shards, out_dir, result);
}

}  // namespace

const std::vector<Architecture>& architectures() {
    // model_type, tokenizer, preset, weight_specs, load, write_mindformers, mla, load_weights
    static const std::vector<Architecture> table = {
        {"qwen3_moe", "qwen3", &Qwen3MoeConfig::preset, &qwen3_moe_specs, &Qwen3MoeModel::load, nullptr, false,
         &Qwen3MoeModel::load_weights},
        {"qwen2_moe", "qwen3", &Qwen2MoeConfig::preset, &qwen2_moe_specs, &Qwen2MoeModel::load, nullptr, false},
        {"glm4_moe", "qwen3", &Glm4MoeConfig::preset, &glm4_moe_specs, &Glm4MoeModel::load, nullptr, false},
        {"mixtral", "qwen3", &MixtralConfig::preset, &mixtral_specs, &MixtralModel::load, nullptr, false},
        {"deepseek_v3", "deepseek_v3", &DeepseekV3Config::preset, &deepseek_specs, &DeepseekV3Model::load,
         &deepseek_mindformers, true, &DeepseekV3Model::load_weights},
        {"deepseek_v2", "deepseek_v3", &DeepseekV3Config::preset, &deepseek_specs, &DeepseekV3Model::load,
         &deepseek_mindformers, true},
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
