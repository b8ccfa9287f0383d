// PCRE2 wrapper: compile once with JIT, match with per-call match data.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "moeserve/tokenizer/regex.h"

#include <pcre2.h>

#include <optional>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/unicode_compat.h"

namespace moeserve::tokenizer {
namespace {

// \p{X} / \P{X} (also Oniguruma's \p{^X}) at pattern[i] (the backslash), rewritten so that the
// general category X has HF's members (see the NOTE in regex.h). Appends the text to out and
// returns the index of the escape's last character; nullopt (nothing appended) when the escape
// is not of that form or X needs no change.
std::optional<size_t> rewrite_category(std::string_view pattern, size_t i, bool in_class, std::string_view where,
                                       std::string& out) {
    if (i + 2 >= pattern.size() || pattern[i + 2] != '{') return std::nullopt;
    size_t close = pattern.find('}', i + 3);
    if (close == std::string_view::npos) return std::nullopt;
    bool negated = pattern[i + 1] == 'P';
    std::string_view name = pattern.substr(i + 3, close - i - 3);
    if (!name.empty() && name.front() == '^') {
        negated = !negated;
        name.remove_prefix(1);
    }
    const CategoryDelta* delta = hf_category_delta(name);
    if (delta == nullptr) return std::nullopt;
    const std::string base = "\\p{" + std::string(name) + "}";
    const std::string add(delta->add);
    const std::string remove(delta->remove);
    if (in_class && (negated || !remove.empty())) {
        // PCRE2 10.42 has no class subtraction, so these cannot be written inside [...].
        raise(ErrorCode::kUnsupported,
              "{}: regex '{}' uses {} inside a character class; Hugging Face's Unicode data for "
              "that category differs from PCRE2's in a way moeserve cannot express there",
              where, pattern, pattern.substr(i, close - i + 1));
    }
    if (in_class) {
        out += base + add;
    } else if (!negated) {
        out += remove.empty() ? "[" + base + add + "]" : "(?:(?![" + remove + "])[" + base + add + "])";
    } else {
        out += remove.empty() ? "[^" + base + add + "]" : "(?:[^" + base + add + "]|[" + remove + "])";
    }
    return close;
}

// See the NOTE in regex.h: \s becomes Oniguruma's White_Space set and \p{X} HF's category X.
// With hf_unicode false, only U+0085 is added to \s: the pattern that is exact on text without
// any code point of has_hf_regex_delta.
std::string onig_compatible(std::string_view pattern, std::string_view where, bool hf_unicode) {
    const std::string space = hf_unicode ? std::string(kHfWhiteSpaceItems) : "\\s\\x{85}";
    std::string out;
    out.reserve(pattern.size() + 16);
    bool in_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
        char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            char next = pattern[i + 1];
            if (hf_unicode && (next == 'p' || next == 'P')) {
                if (auto last = rewrite_category(pattern, i, in_class, where, out)) {
                    i = *last;
                    continue;
                }
            }
            ++i;
            if (next == 's') {
                out += in_class ? space : "[" + space + "]";
            } else if (next == 'S' && !in_class) {
                out += "[^" + space + "]";
            } else {
                out += c;
                out += next;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out += c;
            // A ']' right after '[' or '[^' is a literal member, not the end of the class.
            if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
            if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
            continue;
        }
        if (in_class && c == ']') in_class = false;
        out += c;
    }
    return out;
}

// Compiles pattern (already rewritten) with JIT; raises Error kInvalidModel naming `where`.
pcre2_code* compile(const std::string& compiled, std::string_view original, std::string_view where, bool literal) {
    // PCRE2_LITERAL rejects PCRE2_UCP, which only matters for classes anyway.
    uint32_t flags = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), flags, &error_code,
                                     &error_offset, nullptr);
    if (code == nullptr) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error_code, message, sizeof(message));
        raise(ErrorCode::kInvalidModel, "{}: cannot compile regex '{}' at offset {}: {}", where, original, error_offset,
              reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
    return code;
}

}  // namespace

struct Regex::Impl {
    pcre2_code* code = nullptr;   // HF's Unicode data (the NOTE in regex.h)
    pcre2_code* plain = nullptr;  // PCRE2's own classes; null when the pattern has no delta
    ~Impl() {
        pcre2_code_free(code);
        pcre2_code_free(plain);
    }
};

Regex::Regex(std::string_view pattern, std::string_view where, Options options)
    : pattern_(pattern), impl_(std::make_unique<Impl>()) {
    if (options.literal) {
        impl_->code = compile(std::string(pattern), pattern, where, true);
        return;
    }
    std::string compat = onig_compatible(pattern, where, true);
    std::string plain = onig_compatible(pattern, where, false);
    impl_->code = compile(compat, pattern, where, false);
    // NOTE(#15): the classes with HF's extra code points make PCRE2 up to ~1.5x slower, so text
    // without any such code point (nearly all text) runs on the plain pattern.
    if (plain != compat) impl_->plain = compile(plain, pattern, where, false);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> matches;
    pcre2_code* code = impl_->plain != nullptr && !has_hf_regex_delta(text) ? impl_->plain : impl_->code;
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
    MOESERVE_CHECK(data != nullptr, "pcre2_match_data_create_from_pattern failed");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;
    while (start <= text.size()) {
        int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            pcre2_match_data_free(data);
            raise(ErrorCode::kInvalidArgument,
                  "the text is too complex for the pre-tokenizer regex '{}' (PCRE2 error {} at "
                  "byte {}); split the input",
                  pattern_, rc, start);
        }
        MOESERVE_CHECK(rc >= 0, "pcre2_match failed with {} on pattern '{}'", rc, pattern_);
        PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
        size_t begin = ovector[0];
        size_t end = ovector[1];
        matches.emplace_back(begin, end);
        if (end > begin) {
            start = end;
            continue;
        }
        if (end >= text.size()) break;
        start = end + 1;  // step over one whole character after an empty match
        while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
    pcre2_match_data_free(data);
    return matches;
}

}  // namespace moeserve::tokenizer
