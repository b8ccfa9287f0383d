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
    // NOTE: Oniguruma's \s also matches U+0085 (NEL) and PCRE2's does not, so \s and \S outside
    // character classes and \s inside them are rewritten to include it.
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
