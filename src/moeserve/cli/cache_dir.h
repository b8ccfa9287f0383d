// Where setup.sh caches downloads (tokenizers, demo models).
#pragma once

#include <cstdlib>
#include <filesystem>

namespace moeserve::cli {

// env: MOESERVE_CACHE overrides the default ~/.cache/moeserve (the same variable scripts/setup.sh reads).
inline std::filesystem::path cache_dir() {
    if (const char* env = std::getenv("MOESERVE_CACHE"); env && *env) return env;
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : "/tmp") / ".cache" / "moeserve";
}

}  // namespace moeserve::cli
