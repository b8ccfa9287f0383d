// Reading model.safetensors.index.json (see safetensors_index.h).
#include "moeserve/io/safetensors_index.h"

#include <set>

#include "moeserve/core/error.h"
#include "moeserve/io/json_file.h"

namespace moeserve::io {
namespace {

bool is_plain_file_name(const std::string& s) {
    return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
           s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

SafetensorsIndex parse_safetensors_index(const nlohmann::json& json, const std::string& file_label) {
    if (!json.is_object()) {
        raise(ErrorCode::kInvalidModel, "{}: must be a JSON object, got {}", file_label, json.type_name());
    }
    auto wm = json.find("weight_map");
    if (wm == json.end() || !wm->is_object()) {
        raise(ErrorCode::kInvalidModel, "{}: needs a \"weight_map\" object (tensor name -> shard file)", file_label);
    }
    SafetensorsIndex index;
    std::set<std::string> shards;
    for (const auto& [name, file] : wm->items()) {
        if (!file.is_string() || !is_plain_file_name(file.get<std::string>())) {
            raise(ErrorCode::kInvalidModel,
                  "{}: weight_map['{}'] must be the name of a file in the model directory, got {}", file_label, name,
                  file.is_primitive() ? file.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                                      : std::string("a JSON ") + file.type_name());
        }
        index.weight_map.emplace(name, file.get<std::string>());
        shards.insert(file.get<std::string>());
    }
    index.shard_files.assign(shards.begin(), shards.end());
    auto meta = json.find("metadata");
    if (meta != json.end() && !meta->is_null()) {
        if (!meta->is_object()) {
            raise(ErrorCode::kInvalidModel, "{}: \"metadata\" must be an object, got {}", file_label,
                  meta->type_name());
        }
        auto total = meta->find("total_size");
        if (total != meta->end() && total->is_number_unsigned()) index.total_size = total->get<uint64_t>();
    }
    return index;
}

SafetensorsIndex read_safetensors_index(const std::filesystem::path& path) {
    return parse_safetensors_index(read_json_file(path), path.string());
}

}  // namespace moeserve::io
