#include "moeserve/cli/generation_config.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "moeserve/cli/serve_layout.h"
#include "moeserve/core/error.h"
#include "moeserve/ipc/request_validation.h"

namespace moeserve::cli {
namespace {

using Json = nlohmann::json;

std::optional<float> number(const Json& j, const char* key, const std::string& where) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_number())
        raise(ErrorCode::kInvalidModel, "{}: field '{}' must be a number; got {}", where, key, it->dump());
    return it->get<float>();
}

std::optional<int32_t> integer(const Json& j, const char* key, const std::string& where) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer())
        raise(ErrorCode::kInvalidModel, "{}: field '{}' must be an integer; got {}", where, key, it->dump());
    return it->get<int32_t>();
}

}  // namespace

GenerationConfig read_generation_config(const std::string& mode, const std::string& model_dir,
                                        const std::string& overrides) {
    GenerationConfig out;
    Json j = Json::object();
    if (mode != "vllm") {
        const auto path = std::filesystem::path(mode == "auto" ? model_dir : mode) / "generation_config.json";
        if (std::filesystem::exists(path)) {
            out.source = path.string();
            j = Json::parse(read_text_file(path.string()), nullptr, false);
            if (!j.is_object()) raise(ErrorCode::kInvalidModel, "{} is not a JSON object", out.source);
        } else if (mode != "auto") {
            raise(ErrorCode::kNotFound, "--generation-config {}: no generation_config.json there", mode);
        }
    }
    if (!overrides.empty()) {
        const Json o = Json::parse(overrides, nullptr, false);
        if (!o.is_object())
            raise(ErrorCode::kInvalidArgument, "--override-generation-config must be a JSON object; got {}", overrides);
        for (const auto& [k, v] : o.items()) j[k] = v;
    }
    const std::string where = out.source.empty() ? "--override-generation-config" : out.source;
    auto& d = out.defaults;
    d.temperature = number(j, "temperature", where);
    d.top_p = number(j, "top_p", where);
    d.min_p = number(j, "min_p", where);
    d.repetition_penalty = number(j, "repetition_penalty", where);
    d.top_k = integer(j, "top_k", where);
    d.max_tokens = integer(j, "max_new_tokens", where);
    if (const auto eos = j.find("eos_token_id"); eos != j.end() && !eos->is_null()) {
        const auto add = [&](const Json& e) {
            if (!e.is_number_integer())
                raise(ErrorCode::kInvalidModel, "{}: field 'eos_token_id' must hold integers; got {}", where, e.dump());
            out.eos_token_ids.push_back(e.get<int32_t>());
        };
        if (eos->is_array()) {
            for (const auto& e : *eos) add(e);
        } else {
            add(*eos);
        }
    }
    return out;
}

std::vector<int32_t> model_eos_token_ids(const nlohmann::json& config, const std::string& dir,
                                         std::optional<int32_t> tokenizer_eos, const GenerationConfig& generation) {
    std::vector<int32_t> from_config;
    if (const auto eos = config.find("eos_token_id"); eos != config.end() && !eos->is_null()) {
        const auto add = [&](const nlohmann::json& e) {
            if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
                raise(ErrorCode::kInvalidModel, "{}/config.json: field 'eos_token_id' must hold token ids; got {}", dir,
                      e.dump());
            from_config.push_back(e.get<int32_t>());
        };
        if (eos->is_array()) {
            for (const auto& e : *eos) add(e);
        } else {
            add(*eos);
        }
    }
    return ipc::eos_token_set(from_config, tokenizer_eos, generation.eos_token_ids);
}

}  // namespace moeserve::cli
