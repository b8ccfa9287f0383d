// Normalizer implementations. NFC/NFD/NFKC/NFKD go through utf8proc_map, around the code points
// Hugging Face's older Unicode data does not know (unicode_compat.h).
#include "moeserve/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/tokenizer/unicode_compat.h"
#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer {
namespace {

// Code points with NFC_Quick_Check=Yes and canonical combining class 0 in the ranges that make up
// most text: Latin below the combining marks, general and CJK punctuation, kana, CJK ideographs,
// Hangul syllables, fullwidth ASCII. A string of
// only such characters is already in NFC (the Unicode quick-check rule), so utf8proc is skipped.
// Any other character (combining marks, jamo, compatibility ideographs...) takes the full path.
bool nfc_inert(char32_t cp) {
    return cp < 0x300 || (cp >= 0x2010 && cp <= 0x2027) || (cp >= 0x2030 && cp <= 0x205E) ||
           (cp >= 0x3000 && cp <= 0x3029) || (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x30A1 && cp <= 0x30FA) ||
           (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xFF01 && cp <= 0xFF60);
}

bool all_nfc_inert(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
        if (static_cast<unsigned char>(text[pos]) < 0x80) {
            ++pos;
            continue;
        }
        size_t n = 0;
        if (!nfc_inert(utf8_decode(text, pos, &n))) return false;
        pos += n;
    }
    return true;
}

// utf8proc_map of text under options, appended to out.
void append_mapped(std::string_view text, int options, std::string& out) {
    if (text.empty()) return;
    utf8proc_uint8_t* mapped = nullptr;
    utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &mapped, static_cast<utf8proc_option_t>(options));
    if (n < 0) {
        raise(ErrorCode::kInvalidArgument, "Unicode normalization failed: {}", utf8proc_errmsg(n));
    }
    out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
}

class UnicodeNormalizer final : public Normalizer {
public:
    UnicodeNormalizer(int options, bool skip_inert) : options_(options), skip_inert_(skip_inert) {}

    // NOTE(#15): HF normalizes with Unicode 9.0 data, where the code points of
    // hf_normalizer_unknown are unassigned: inert starters that nothing reorders across or
    // composes with. So the text is cut at each of them, the pieces between are normalized by
    // utf8proc (Unicode 15.0) and the code point itself is kept as it is.
    std::string normalize(std::string_view text) const override {
        // Pure ASCII is invariant under every normalization form.
        bool ascii = true;
        for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
        if (ascii || (skip_inert_ && all_nfc_inert(text))) return std::string(text);
        std::string out;
        out.reserve(text.size());
        size_t piece = 0;
        size_t pos = 0;
        while (pos < text.size()) {
            if (static_cast<unsigned char>(text[pos]) < 0x80) {
                ++pos;
                continue;
            }
            size_t n = 0;
            char32_t cp = utf8_decode(text, pos, &n);
            if (hf_normalizer_unknown(cp)) {
                append_mapped(text.substr(piece, pos - piece), options_, out);
                out.append(text.substr(pos, n));
                piece = pos + n;
            }
            pos += n;
        }
        append_mapped(text.substr(piece), options_, out);
        return out;
    }

private:
    int options_;
    bool skip_inert_;  // NFC only: see nfc_inert
};

class SequenceNormalizer final : public Normalizer {
public:
    explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}

    std::string normalize(std::string_view text) const override {
        std::string current(text);
        for (const auto& part : parts_) current = part->normalize(current);
        return current;
    }

private:
    std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, std::string_view where) {
    if (spec.is_null()) return nullptr;
    if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
        raise(ErrorCode::kInvalidModel, "{}: normalizer must be an object with a \"type\"; got {}", where,
              spec.dump().substr(0, 200));
    }
    const std::string type = spec["type"].get<std::string>();
    constexpr int kBase = UTF8PROC_STABLE;
    if (type == "NFC") return std::make_unique<UnicodeNormalizer>(kBase | UTF8PROC_COMPOSE, true);
    if (type == "NFD") {
        return std::make_unique<UnicodeNormalizer>(kBase | UTF8PROC_DECOMPOSE, false);
    }
    if (type == "NFKC") {
        return std::make_unique<UnicodeNormalizer>(kBase | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, false);
    }
    if (type == "NFKD") {
        return std::make_unique<UnicodeNormalizer>(kBase | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, false);
    }
    if (type == "Sequence") {
        std::vector<std::unique_ptr<Normalizer>> parts;
        for (const auto& part : spec.value("normalizers", nlohmann::json::array())) {
            auto normalizer = make_normalizer(part, where);
            if (normalizer != nullptr) parts.push_back(std::move(normalizer));
        }
        if (parts.empty()) return nullptr;
        if (parts.size() == 1) return std::move(parts.front());
        return std::make_unique<SequenceNormalizer>(std::move(parts));
    }
    raise(ErrorCode::kUnsupported,
          "{}: normalizer type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)", where, type);
}

}  // namespace moeserve::tokenizer
