// Lookups into the generated tables of unicode_compat_table.inc.
#include "moeserve/tokenizer/unicode_compat.h"

#include <algorithm>
#include <iterator>

namespace moeserve::tokenizer {
namespace {

#include "moeserve/tokenizer/unicode_compat_table.inc"

}  // namespace

const CategoryDelta* hf_category_delta(std::string_view name) {
    for (const auto& delta : kCategoryDeltas) {
        if (delta.name == name) return &delta;
    }
    return nullptr;
}

bool hf_normalizer_unknown(char32_t cp) {
    // First range whose last code point is >= cp; the table is sorted and disjoint.
    const auto* it = std::lower_bound(std::begin(kNormalizerUnknown), std::end(kNormalizerUnknown),
                                      cp, [](const char32_t(&r)[2], char32_t v) { return r[1] < v; });
    return it != std::end(kNormalizerUnknown) && (*it)[0] <= cp;
}

}  // namespace moeserve::tokenizer
