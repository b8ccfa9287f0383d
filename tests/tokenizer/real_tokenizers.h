// The real Qwen3, DeepSeek-V3 and gpt-oss tokenizers (setup.sh's cache), loaded once per test binary:
// a 150k-token tokenizer takes a fraction of a second to load, and the golden suites share it.
#pragma once

#include <map>
#include <string>

#include "moeserve/tokenizer/tokenizer.h"
#include "test_support.h"

namespace moeserve::tokenizer {

// name: "qwen3", "deepseek_v3" or "gpt_oss". Not thread-safe (gtest runs tests on one thread).
inline const Tokenizer& real_tokenizer(const std::string& name) {
    static std::map<std::string, Tokenizer> loaded;
    auto it = loaded.find(name);
    if (it == loaded.end()) it = loaded.emplace(name, Tokenizer::from_dir(moeserve::test::tokenizer_dir(name))).first;
    return it->second;
}

}  // namespace moeserve::tokenizer
