// Parses tokenizer_config.json; special tokens are either "text" or {"content": "text", ...}.
#include "moeserve/tokenizer/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include "moeserve/core/error.h"

namespace moeserve::tokenizer {
namespace {

std::optional<std::string> token_field(const nlohmann::json& config, const char* key, std::string_view where) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
        return (*it)["content"].get<std::string>();
    }
    raise(ErrorCode::kInvalidModel, "{}: \"{}\" must be a string, null or an object with \"content\"; got {}", where,
          key, it->dump());
}

std::optional<std::string> chat_template_field(const nlohmann::json& config, std::string_view where) {
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_array()) {  // [{"name": "default", "template": "..."}, ...]
        for (const auto& entry : *it) {
            if (entry.value("name", std::string()) == "default" && entry.contains("template")) {
                return entry["template"].get<std::string>();
            }
        }
        return std::nullopt;
    }
    raise(ErrorCode::kInvalidModel, "{}: \"chat_template\" must be a string or a list; got {}", where, it->type_name());
}

std::optional<bool> bool_field(const nlohmann::json& config, const char* key) {
    auto it = config.find(key);
    if (it == config.end() || !it->is_boolean()) return std::nullopt;
    return it->get<bool>();
}

}  // namespace

TokenizerConfig TokenizerConfig::parse(std::string_view json_text, std::string_view where) {
    TokenizerConfig config;
    if (json_text.empty()) return config;
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
        raise(ErrorCode::kInvalidModel, "{}: not valid JSON: {}", where, e.what());
    }
    if (!doc.is_object()) raise(ErrorCode::kInvalidModel, "{}: expected a JSON object", where);
    config.tokenizer_class = doc.value("tokenizer_class", std::string());
    config.bos_token = token_field(doc, "bos_token", where);
    config.eos_token = token_field(doc, "eos_token", where);
    config.pad_token = token_field(doc, "pad_token", where);
    config.chat_template = chat_template_field(doc, where);
    config.add_bos_token = bool_field(doc, "add_bos_token");
    config.add_eos_token = bool_field(doc, "add_eos_token");
    return config;
}

}  // namespace moeserve::tokenizer
