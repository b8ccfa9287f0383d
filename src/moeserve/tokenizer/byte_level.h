// GPT-2's byte-level alphabet: every byte maps to one printable code point, so BPE can run on
// arbitrary bytes. Shared by the ByteLevel pre-tokenizer and the ByteLevel decoder.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace moeserve::tokenizer {

class ByteLevelAlphabet {
public:
    ByteLevelAlphabet();

    // Appends the byte-level characters of each byte of text to out.
    void encode(std::string_view text, std::string& out) const;

    // Appends the bytes that token's characters stand for; returns false (appending nothing) if
    // some character of token is not in the alphabet (HF then keeps the token's own bytes).
    bool decode(std::string_view token, std::string& out) const;

    // The UTF-8 encoding of the character for byte b.
    std::string_view char_of(uint8_t b) const {
        return std::string_view(chars_[b].data(), static_cast<size_t>(char_lengths_[b]));
    }

private:
    std::array<std::array<char, 2>, 256> chars_{};  // UTF-8 of each byte's character (1-2 bytes)
    std::array<uint8_t, 256> char_lengths_{};
    std::array<int16_t, 324> byte_of_{};  // code point (< 324) -> byte, -1 if not in the alphabet
};

}  // namespace moeserve::tokenizer
