// UTF-8 helpers; the validity table follows the Unicode standard's well-formed byte sequences
// (Table 3-7), which is also what Rust's str validation accepts.
#include "moeserve/core/utf8.h"

namespace moeserve {
namespace {

// Total sequence length announced by a lead byte, 0 for bytes that cannot start a sequence.
int sequence_length(uint8_t lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

// Allowed range of the second byte for a lead byte (the later ones are always 0x80..0xBF).
bool second_byte_ok(uint8_t lead, uint8_t b) {
    switch (lead) {
        case 0xE0:
            return b >= 0xA0 && b <= 0xBF;
        case 0xED:
            return b >= 0x80 && b <= 0x9F;
        case 0xF0:
            return b >= 0x90 && b <= 0xBF;
        case 0xF4:
            return b >= 0x80 && b <= 0x8F;
        default:
            return b >= 0x80 && b <= 0xBF;
    }
}

// Number of bytes starting at pos that are a valid prefix of a sequence (lead included); sets
// *needed to the full length. Returns 0 for an invalid lead byte.
size_t valid_prefix(std::string_view text, size_t pos, int* needed) {
    auto lead = static_cast<uint8_t>(text[pos]);
    int n = sequence_length(lead);
    *needed = n;
    if (n == 0) return 0;
    size_t k = 1;
    while (k < static_cast<size_t>(n) && pos + k < text.size()) {
        auto b = static_cast<uint8_t>(text[pos + k]);
        bool ok = k == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
        if (!ok) break;
        ++k;
    }
    return k;
}

}  // namespace

size_t utf8_valid_sequence_length(std::string_view text, size_t pos) {
    int needed = 0;
    size_t k = valid_prefix(text, pos, &needed);
    return (needed > 0 && k == static_cast<size_t>(needed)) ? k : 0;
}

char32_t utf8_decode(std::string_view text, size_t pos, size_t* length) {
    auto b0 = static_cast<uint8_t>(text[pos]);
    if (b0 < 0x80) {
        *length = 1;
        return b0;
    }
    int n = sequence_length(b0);
    char32_t cp = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
    *length = static_cast<size_t>(n);
    return cp;
}

void utf8_append(char32_t cp, std::string& out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool utf8_is_valid(std::string_view text, size_t* bad_offset) {
    size_t pos = 0;
    while (pos < text.size()) {
        if (static_cast<uint8_t>(text[pos]) < 0x80) {
            ++pos;
            continue;
        }
        size_t n = utf8_valid_sequence_length(text, pos);
        if (n == 0) {
            if (bad_offset != nullptr) *bad_offset = pos;
            return false;
        }
        pos += n;
    }
    return true;
}

void utf8_append_lossy(std::string_view bytes, std::string& out) {
    size_t pos = 0;
    while (pos < bytes.size()) {
        size_t start = pos;
        while (pos < bytes.size() && static_cast<uint8_t>(bytes[pos]) < 0x80) ++pos;
        if (pos > start) out.append(bytes.substr(start, pos - start));
        if (pos >= bytes.size()) break;
        int needed = 0;
        size_t k = valid_prefix(bytes, pos, &needed);
        if (needed > 0 && k == static_cast<size_t>(needed)) {
            out.append(bytes.substr(pos, k));
            pos += k;
        } else {
            out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal invalid subpart
            pos += k == 0 ? 1 : k;
        }
    }
}

size_t utf8_incomplete_tail(std::string_view bytes) {
    size_t n = bytes.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        auto b = static_cast<uint8_t>(bytes[n - back]);
        if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: keep looking for the lead
        int needed = 0;
        size_t k = valid_prefix(bytes, n - back, &needed);
        return (needed > 1 && k == back && back < static_cast<size_t>(needed)) ? back : 0;
    }
    return 0;
}

bool is_unicode_whitespace(char32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace moeserve
