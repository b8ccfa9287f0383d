#include "moeserve/io/json_file.h"

#include <fstream>
#include <sstream>

#include "moeserve/core/error.h"

namespace moeserve::io {

std::string read_text_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        raise(ErrorCode::kNotFound, "{}: no such file", path.string());
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) raise(ErrorCode::kIo, "{}: cannot open for reading", path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) raise(ErrorCode::kIo, "{}: read failed", path.string());
    return ss.str();
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
    const std::string text = read_text_file(path);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        raise(ErrorCode::kInvalidModel, "{}: not valid JSON at byte {}: {}", path.string(), e.byte, e.what());
    }
}

}  // namespace moeserve::io
