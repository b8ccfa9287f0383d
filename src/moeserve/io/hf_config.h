// Typed access to Hugging Face config.json fields with errors that name the file and the field.
// Model configs (model/<arch>/config.h) use these to turn JSON into const structs once.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace moeserve::io {

// A config.json object plus the label (file path) used in error messages.
class HfConfig {
public:
    HfConfig(nlohmann::json json, std::string label);
    // Reads DIR/config.json.
    static HfConfig from_model_dir(const std::string& model_dir);

    const nlohmann::json& json() const { return json_; }
    const std::string& label() const { return label_; }
    bool has(const std::string& key) const;  // present and not null

    // Required fields: Error kInvalidModel when missing or of the wrong type.
    int64_t get_int(const std::string& key) const;
    double get_float(const std::string& key) const;
    std::string get_string(const std::string& key) const;
    // Optional fields: the default when missing or null; Error when present with a wrong type.
    int64_t get_int(const std::string& key, int64_t fallback) const;
    double get_float(const std::string& key, double fallback) const;
    bool get_bool(const std::string& key, bool fallback) const;
    std::string get_string(const std::string& key, const std::string& fallback) const;
    std::optional<int64_t> get_optional_int(const std::string& key) const;
    std::vector<int64_t> get_int_list(const std::string& key) const;  // missing/null -> empty
    // An int or a list of ints (eos_token_id may be either); missing/null -> empty.
    std::vector<int64_t> get_int_or_list(const std::string& key) const;
    // A nested object; missing/null -> nullopt.
    std::optional<HfConfig> get_object(const std::string& key) const;

    // Error kInvalidModel: "<label>: <key> must be <what>; got <value>".
    [[noreturn]] void fail(const std::string& key, const std::string& what) const;

private:
    const nlohmann::json* find(const std::string& key) const;
    nlohmann::json json_;
    std::string label_;
};

}  // namespace moeserve::io
