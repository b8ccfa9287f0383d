#include "moeserve/core/base64.h"

#include <array>
#include <cstdint>

namespace moeserve {
namespace {

// 0-63 for the alphabet, -1 for every other byte.
constexpr std::array<int8_t, 256> decoding_table() {
    std::array<int8_t, 256> t{};
    for (auto& v : t) v = -1;
    constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
}

constexpr std::array<int8_t, 256> kDecode = decoding_table();

}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
    if (text.size() % 4 != 0) return std::nullopt;
    size_t padding = 0;
    while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') ++padding;
    std::string out;
    out.reserve(text.size() / 4 * 3);
    uint32_t bits = 0;
    int filled = 0;
    for (size_t i = 0; i < text.size() - padding; ++i) {
        const int8_t v = kDecode[static_cast<uint8_t>(text[i])];
        if (v < 0) return std::nullopt;
        bits = (bits << 6) | static_cast<uint32_t>(v);
        filled += 6;
        if (filled >= 8) {
            filled -= 8;
            out.push_back(static_cast<char>((bits >> filled) & 0xFF));
        }
    }
    // what is left must be the zero bits of a padded quantum, nothing more
    if ((bits & ((1u << filled) - 1)) != 0) return std::nullopt;
    return out;
}

}  // namespace moeserve
