// Reading JSON files (config.json, tokenizer.json, index files) with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace moeserve::io {

// Parses the file as JSON. Throws Error: kNotFound when it does not exist, kIo when it cannot be
// read, kInvalidModel when it is not valid JSON (the message names the file and byte offset).
nlohmann::json read_json_file(const std::filesystem::path& path);

// Reads the whole file into a string; throws Error kNotFound / kIo naming the file.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace moeserve::io
