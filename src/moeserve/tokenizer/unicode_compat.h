// Where Hugging Face tokenizers' Unicode data differs from ours, so that moeserve matches HF's ids
// rather than a newer Unicode: its regex engine (Oniguruma, Unicode 16.0) knows letters PCRE2
// (Unicode 14.0) does not, and its normalizer (Unicode 9.0) leaves alone marks that utf8proc
// (Unicode 15.0) reorders. Generated tables, see unicode_compat_table.inc. Depends on utf8.h only.
#pragma once

#include <string_view>

namespace moeserve::tokenizer {

// For a general category name as written in \p{...} (one letter "L", or two letters "Lo"):
// `add` are the code points HF's regex puts in it and PCRE2 does not, `remove` the reverse, both
// as PCRE2 character-class items ("\x{1C89}\x{A7CB}-\x{A7CC}..."), either possibly empty.
struct CategoryDelta {
    std::string_view name;
    std::string_view add;
    std::string_view remove;
};

// The delta for category `name`, or nullptr when PCRE2 and HF agree on it (or `name` is not a
// general category, e.g. a script). Thread-safe (static tables only).
const CategoryDelta* hf_category_delta(std::string_view name);

// True if text (valid UTF-8) holds a code point whose membership in some general category or in
// \s differs between HF's regex engine and PCRE2. Without one, a pattern matches the same with
// or without the rewrite of regex.h, and PCRE2 is faster without. Thread-safe.
bool has_hf_regex_delta(std::string_view text);

// True if HF's normalizer treats cp as an unassigned, inert starter (no combining class, no
// decomposition, no composition) while utf8proc gives it a combining class or a composition.
bool hf_normalizer_unknown(char32_t cp);

// White_Space as HF's regex \s matches it (Oniguruma): U+0009..U+000D, U+0020, U+0085, U+00A0,
// U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, as PCRE2 class items. PCRE2's
// own \s lacks U+0085 and has U+180E.
inline constexpr std::string_view kHfWhiteSpaceItems =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

}  // namespace moeserve::tokenizer
