// libFuzzer target for tiktoken.model files (tokenizer/tiktoken.h): the input is the file. Any
// input may be rejected with moeserve::Error, nothing else may escape, and accepted ranks must
// satisfy the reader's contract (non-empty distinct tokens, ranks 0..N-1 each once) and convert
// into a vocabulary of N entries whose merges join two of its tokens into a third.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/tiktoken.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        const auto ranks = moeserve::tokenizer::parse_tiktoken_ranks(text, "fuzz/tiktoken.model");
        std::set<int64_t> seen;
        for (const auto& [bytes, rank] : ranks) {
            if (bytes.empty() || rank < 0 || rank >= static_cast<int64_t>(ranks.size()) || !seen.insert(rank).second) {
                std::abort();
            }
        }
        const size_t n = ranks.size();
        const auto pattern = moeserve::tokenizer::tiktoken_pattern("tokenization_kimi.TikTokenTokenizer");
        const auto json = moeserve::tokenizer::tiktoken_tokenizer_json(ranks, *pattern, nullptr, 4);
        if (json.vocab.size() != n || json.doc["added_tokens"].size() != 4) std::abort();
        std::set<std::string> vocab;
        for (const auto& [token, id] : json.vocab) vocab.insert(token);
        for (const auto& [left, right] : json.merges) {
            if (vocab.count(left) == 0 || vocab.count(right) == 0 || vocab.count(left + right) == 0) std::abort();
        }
    } catch (const moeserve::Error&) {
        // Rejected with a message: the expected outcome for most inputs.
    }
    return 0;
}
