// model.safetensors.index.json: which shard file holds each tensor of a sharded checkpoint.
// Depends on core and nlohmann-json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moeserve::io {

inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";

struct SafetensorsIndex {
    std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
    std::vector<std::string> shard_files;           // distinct values of weight_map, sorted
    std::optional<uint64_t> total_size;             // metadata.total_size, when present
};

// Validates the parsed index: an object with "weight_map" (an object of tensor name -> shard
// file name; a name must be a plain file in the same directory: no '/', not "." or "..") and an
// optional "metadata" object. Throws Error kInvalidModel naming `file_label` and the entry.
SafetensorsIndex parse_safetensors_index(const nlohmann::json& json, const std::string& file_label);

// Reads and validates the index file. Throws kNotFound / kIo / kInvalidModel naming the file.
SafetensorsIndex read_safetensors_index(const std::filesystem::path& path);

}  // namespace moeserve::io
