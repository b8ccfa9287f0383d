// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (PCRE2 regex or literal, all five
// behaviours, invert), Digits, ByteLevel and Sequence. Anything else is Error kUnsupported.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::tokenizer {

// How a Split keeps the matched delimiters (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
public:
    virtual ~PreTokenizer() = default;
    // Replaces pieces with their finer split, in order; empty pieces are dropped (as HF does).
    // Every piece is valid UTF-8. Thread-safe.
    virtual void pre_tokenize(std::vector<std::string>& pieces) const = 0;
};

// Builds the pre-tokenizer described by spec (tokenizer.json "pre_tokenizer"); nullptr for null.
// `where` prefixes errors.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, std::string_view where);

// One span of a piece and whether it was a delimiter match; the spans tile the piece.
struct SplitSpan {
    size_t begin = 0;
    size_t end = 0;
    bool is_match = false;
};

// Applies behavior to the tiled spans of piece and appends the resulting non-empty pieces to out
// (HF NormalizedString::split).
void split_with_behavior(std::string_view piece, const std::vector<SplitSpan>& spans, SplitBehavior behavior,
                         std::vector<std::string>& out);

}  // namespace moeserve::tokenizer
