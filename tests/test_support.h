// Shared by all tests: the paths of the source tree, the build tree and the tokenizer cache of
// setup.sh, and the message of a raised Error.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "moeserve/core/error.h"

namespace moeserve::test {

// The compiled-in paths are relative to the build folder, where CTest runs every test
// (tests/CMakeLists.txt); absolute here so a path handed to another process stays right.
inline std::filesystem::path source_dir() { return std::filesystem::absolute(MOESERVE_SOURCE_DIR).lexically_normal(); }
inline std::filesystem::path binary_dir() { return std::filesystem::absolute(MOESERVE_BINARY_DIR).lexically_normal(); }
// Checked-in test data (goldens): tests/data/.
inline std::filesystem::path data_dir() { return source_dir() / "tests" / "data"; }
// The real tokenizer files fetched (or derived) by scripts/setup.sh: "qwen3", "deepseek_v3", ...
inline std::filesystem::path tokenizer_dir(const std::string& name) {
    return std::filesystem::path(MOESERVE_CACHE_DIR) / "tokenizers" / name;
}
// A chat template setup.sh keeps from llama.cpp's models/templates/ ("GLM-4.6.jinja", ...).
inline std::filesystem::path chat_template_file(const std::string& name) {
    return std::filesystem::path(MOESERVE_CACHE_DIR) / "templates" / name;
}
// A fresh scratch directory under the build tree, unique per test name.
inline std::filesystem::path scratch_dir(const std::string& name) {
    auto dir = binary_dir() / "test_scratch" / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

// The message of the Error `f` raises, or "" when it returns.
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace moeserve::test
