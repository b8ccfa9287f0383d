// Lookups into the generated tables of unicode_compat_table.inc. Depends on utf8.h only.
#include "moeserve/tokenizer/unicode_compat.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>

#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer {
namespace {

#include "moeserve/tokenizer/unicode_compat_table.inc"

// True if cp lies in one of the sorted, disjoint [first, last] ranges.
template <size_t N>
bool in_ranges(const char32_t (&ranges)[N][2], char32_t cp) {
    const auto* it = std::lower_bound(std::begin(ranges), std::end(ranges), cp,
                                      [](const char32_t(&r)[2], char32_t v) { return r[1] < v; });
    return it != std::end(ranges) && (*it)[0] <= cp;
}

// One bit per block of 256 code points: set if the block holds any of kRegexDeltaCodePoints, so
// most text (CJK, kana, Hangul, Cyrillic...) is cleared without the binary search.
constexpr size_t kNumBlocks = 0x110000 >> 8;
constexpr std::array<uint64_t, kNumBlocks / 64> kRegexDeltaBlocks = [] {
    std::array<uint64_t, kNumBlocks / 64> bits{};
    for (const auto& r : kRegexDeltaCodePoints) {
        for (char32_t block = r[0] >> 8; block <= (r[1] >> 8); ++block) {
            bits[block / 64] |= uint64_t{1} << (block % 64);
        }
    }
    return bits;
}();

}  // namespace

const CategoryDelta* hf_category_delta(std::string_view name) {
    for (const auto& delta : kCategoryDeltas) {
        if (delta.name == name) return &delta;
    }
    return nullptr;
}

bool has_hf_regex_delta(std::string_view text) {
    // The block (cp >> 8) comes from the first bytes; only a flagged block decodes in full.
    const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
        const unsigned b0 = bytes[pos];
        if (b0 < 0x80) {
            ++pos;
            continue;
        }
        size_t n = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
        if (pos + n > text.size()) break;  // precondition broken (truncated); never read past it
        const unsigned b1 = bytes[pos + 1] & 0x3Fu;
        char32_t block = n == 2   ? (b0 & 0x1Fu) >> 2
                         : n == 3 ? ((b0 & 0x0Fu) << 4) | (b1 >> 2)
                                  : ((b0 & 0x07u) << 10) | (b1 << 4) | ((bytes[pos + 2] & 0x3Fu) >> 2);
        if (block < kNumBlocks && ((kRegexDeltaBlocks[block / 64] >> (block % 64)) & 1u) != 0 &&
            in_ranges(kRegexDeltaCodePoints, utf8_decode(text, pos, &n))) {
            return true;
        }
        pos += n;
    }
    return false;
}

bool hf_normalizer_unknown(char32_t cp) { return cp >= kNormalizerUnknown[0][0] && in_ranges(kNormalizerUnknown, cp); }

}  // namespace moeserve::tokenizer
