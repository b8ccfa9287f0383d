// --generation-config auto|vllm|DIR and --override-generation-config JSON, as vLLM: the sampling
// defaults and extra EOS ids of a model's generation_config.json; and the model's EOS set, which
// every command that makes requests computes here, once at startup.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/serve/routes.h"

namespace moeserve::cli {

struct GenerationConfig {
    serve::GenerationDefaults defaults;
    std::vector<int32_t> eos_token_ids;  // generation_config.json's eos_token_id (int or list)
    std::string source;                  // the file read, or empty
};

// mode: "auto" (model_dir/generation_config.json if present), "vllm" (none), or a folder.
// overrides: a JSON object whose keys replace the file's (may be empty). Raises Error naming the
// file (or the flag) and the field for a value of the wrong type.
GenerationConfig read_generation_config(const std::string& mode, const std::string& model_dir,
                                        const std::string& overrides);

// The model's EOS set (ipc::eos_token_set): config.json's eos_token_id (int, list or absent), the
// tokenizer's EOS token, then generation.eos_token_ids. config: the model's config.json
// (model::ModelSource::config); dir names it in the error for a non-integer id.
std::vector<int32_t> model_eos_token_ids(const nlohmann::json& config, const std::string& dir,
                                         std::optional<int32_t> tokenizer_eos, const GenerationConfig& generation);

}  // namespace moeserve::cli
