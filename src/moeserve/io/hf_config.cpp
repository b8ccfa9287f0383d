#include "moeserve/io/hf_config.h"

#include <filesystem>

#include "moeserve/core/error.h"
#include "moeserve/io/json_file.h"

namespace moeserve::io {

HfConfig::HfConfig(nlohmann::json json, std::string label) : json_(std::move(json)), label_(std::move(label)) {
    if (!json_.is_object()) raise(ErrorCode::kInvalidModel, "{}: expected a JSON object", label_);
}

HfConfig HfConfig::from_model_dir(const std::string& model_dir) {
    const auto path = std::filesystem::path(model_dir) / "config.json";
    if (!std::filesystem::is_directory(model_dir)) {
        raise(ErrorCode::kNotFound, "model directory '{}' does not exist", model_dir);
    }
    return HfConfig(read_json_file(path), path.string());
}

const nlohmann::json* HfConfig::find(const std::string& key) const {
    auto it = json_.find(key);
    if (it == json_.end() || it->is_null()) return nullptr;
    return &*it;
}

bool HfConfig::has(const std::string& key) const { return find(key) != nullptr; }

void HfConfig::fail(const std::string& key, const std::string& what) const {
    const auto* v = find(key);
    raise(ErrorCode::kInvalidModel, "{}: '{}' must be {}; got {}", label_, key, what, v ? v->dump() : "nothing");
}

int64_t HfConfig::get_int(const std::string& key) const {
    const auto* v = find(key);
    if (!v) raise(ErrorCode::kInvalidModel, "{}: required field '{}' is missing", label_, key);
    if (!v->is_number_integer()) {
        // Accept 4.0 for 4, as Python's json would produce for an int-valued float.
        if (v->is_number_float() && v->get<double>() == static_cast<double>(static_cast<int64_t>(v->get<double>()))) {
            return static_cast<int64_t>(v->get<double>());
        }
        fail(key, "an integer");
    }
    return v->get<int64_t>();
}

double HfConfig::get_float(const std::string& key) const {
    const auto* v = find(key);
    if (!v) raise(ErrorCode::kInvalidModel, "{}: required field '{}' is missing", label_, key);
    if (!v->is_number()) fail(key, "a number");
    return v->get<double>();
}

std::string HfConfig::get_string(const std::string& key) const {
    const auto* v = find(key);
    if (!v) raise(ErrorCode::kInvalidModel, "{}: required field '{}' is missing", label_, key);
    if (!v->is_string()) fail(key, "a string");
    return v->get<std::string>();
}

int64_t HfConfig::get_int(const std::string& key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }
double HfConfig::get_float(const std::string& key, double fallback) const {
    return has(key) ? get_float(key) : fallback;
}
std::string HfConfig::get_string(const std::string& key, const std::string& fallback) const {
    return has(key) ? get_string(key) : fallback;
}

bool HfConfig::get_bool(const std::string& key, bool fallback) const {
    const auto* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "true or false");
    return v->get<bool>();
}

std::optional<int64_t> HfConfig::get_optional_int(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return get_int(key);
}

std::vector<int64_t> HfConfig::get_int_list(const std::string& key) const {
    const auto* v = find(key);
    if (!v) return {};
    if (!v->is_array()) fail(key, "a list of integers");
    std::vector<int64_t> out;
    for (const auto& e : *v) {
        if (!e.is_number_integer()) fail(key, "a list of integers");
        out.push_back(e.get<int64_t>());
    }
    return out;
}

std::vector<int64_t> HfConfig::get_int_or_list(const std::string& key) const {
    const auto* v = find(key);
    if (!v) return {};
    if (v->is_number_integer()) return {v->get<int64_t>()};
    return get_int_list(key);
}

std::optional<HfConfig> HfConfig::get_object(const std::string& key) const {
    const auto* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_object()) fail(key, "an object");
    return HfConfig(*v, label_ + ": " + key);
}

}  // namespace moeserve::io
