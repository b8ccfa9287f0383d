// A compiled PCRE2 pattern (UTF + UCP, JIT) that lists the non-overlapping matches in a string,
// standing in for the Oniguruma regexes of Hugging Face tokenizers. Depends on core only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeserve::tokenizer {

class Regex {
public:
    struct Options {
        bool literal = false;  // match the pattern text literally (HF's {"String": ...} pattern)
    };
    // Compiles pattern; raises Error kInvalidModel naming `where` if PCRE2 rejects it.
    // NOTE(#15): the pattern is rewritten to Hugging Face's Unicode data (unicode_compat.h):
    // \s and \S outside classes and \s inside them mean Oniguruma's White_Space (PCRE2's lacks
    // U+0085 and has U+180E); \p{X} and \P{X} for a general category X (L, Lo, N, ...) get the
    // code points Oniguruma's Unicode 16.0 has in X and PCRE2's Unicode 14.0 does not. Other
    // properties (scripts, \w, \d) keep PCRE2's meaning. A category whose delta cannot be
    // written inside a class (\P{L} in [...]) is Error kUnsupported. Text without any code
    // point of has_hf_regex_delta runs on the pattern without the category rewrite (faster,
    // same matches there).
    Regex(std::string_view pattern, std::string_view where, Options options);
    Regex(std::string_view pattern, std::string_view where) : Regex(pattern, where, Options{}) {}
    ~Regex();
    Regex(Regex&&) noexcept;
    Regex& operator=(Regex&&) noexcept;

    // Non-overlapping matches [begin, end) in text, left to right, like Rust's find_iter: after an
    // empty match the search resumes one character later. text must be valid UTF-8.
    // Thread-safe (each call uses its own match data).
    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

    const std::string& pattern() const { return pattern_; }

private:
    struct Impl;
    std::string pattern_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace moeserve::tokenizer
