#include "moeserve/testing/generator_architecture.h"

#include "moeserve/model/deepseek_v3/config.h"
#include "moeserve/testing/generator_mindformers.h"
#include "moeserve/testing/generator_parts.h"
#include "moeserve/testing/presets/presets.h"

namespace moeserve::testing {

namespace {

void deepseek_mindformers(const std::vector<model::WeightSpec>& specs, const io::HfConfig& c, uint64_t seed,
                          const gen::TensorSource& source, int num_shards, const std::filesystem::path& out_dir,
                          GeneratedModel& result) {
    gen::write_mindformers_a8w8(specs, model::DeepseekV3Config::from_json(c), seed, source, num_shards, out_dir,
                                result);
}

}  // namespace

const std::vector<GeneratorArchitecture>& generator_architectures() {
    // model_type, tokenizer, preset, write_mindformers, mla
    static const std::vector<GeneratorArchitecture> table = {
        {"qwen3_moe", "qwen3", &qwen3_moe_preset},
        {"qwen2_moe", "qwen1_5", &qwen2_moe_preset},  // Qwen1.5-MoE's tokenizer and chat template
        {"glm4_moe", "qwen3", &glm4_moe_preset},
        {"mixtral", "qwen3", &mixtral_preset},
        {"gpt_oss", "gpt_oss", &gpt_oss_preset},
        {"deepseek_v3", "deepseek_v3", &deepseek_v3_preset, &deepseek_mindformers, true},
        {"deepseek_v2", "deepseek_v3", &deepseek_v3_preset, &deepseek_mindformers, true},
        {"kimi_k2", "kimi_k2", &deepseek_v3_preset, &deepseek_mindformers, true},
    };
    return table;
}

const GeneratorArchitecture* find_generator_architecture(const std::string& model_type) {
    for (const GeneratorArchitecture& a : generator_architectures()) {
        if (a.model_type == model_type) return &a;
    }
    return nullptr;
}

}  // namespace moeserve::testing
