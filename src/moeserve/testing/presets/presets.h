// The generator's config.json presets, one function per architecture folder (presets/<arch>.cpp),
// each the `preset` of its generator rows (generator_architecture.cpp). Every one takes the row's
// model_type (one folder may serve several) and a size: "tiny" (the tests' models) or "bench"
// (~1B parameters); another size is Error kInvalidArgument. Callers outside the table use
// preset_config (generator.h).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace moeserve::testing {

nlohmann::json qwen3_moe_preset(const std::string& model_type, const std::string& size);
nlohmann::json qwen2_moe_preset(const std::string& model_type, const std::string& size);
// GLM-4.5's structure on Qwen3's vocabulary (the tokenizer the generator ships).
nlohmann::json glm4_moe_preset(const std::string& model_type, const std::string& size);
// Mixtral's structure on Qwen3's vocabulary (the tokenizer the generator ships).
nlohmann::json mixtral_preset(const std::string& model_type, const std::string& size);
nlohmann::json gpt_oss_preset(const std::string& model_type, const std::string& size);
// model_type deepseek_v3 or deepseek_v2 (their routing and scaling differ).
nlohmann::json deepseek_v3_preset(const std::string& model_type, const std::string& size);

}  // namespace moeserve::testing
