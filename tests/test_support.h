// Paths shared by all tests: the source tree, the build tree and the tokenizer cache of setup.sh.
#pragma once

#include <filesystem>
#include <string>

namespace moeserve::test {

inline std::filesystem::path source_dir() { return MOESERVE_SOURCE_DIR; }
inline std::filesystem::path binary_dir() { return MOESERVE_BINARY_DIR; }
// Checked-in test data (goldens): tests/data/.
inline std::filesystem::path data_dir() { return source_dir() / "tests" / "data"; }
// The real tokenizer files fetched by scripts/setup.sh: name is "qwen3" or "deepseek_v3".
inline std::filesystem::path tokenizer_dir(const std::string& name) {
    return std::filesystem::path(MOESERVE_CACHE_DIR) / "tokenizers" / name;
}
// A fresh scratch directory under the build tree, unique per test name.
inline std::filesystem::path scratch_dir(const std::string& name) {
    auto dir = binary_dir() / "test_scratch" / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace moeserve::test
