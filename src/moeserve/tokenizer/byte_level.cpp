// bytes_to_unicode() of GPT-2: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order.
#include "moeserve/tokenizer/byte_level.h"

#include "moeserve/core/utf8.h"

namespace moeserve::tokenizer {

ByteLevelAlphabet::ByteLevelAlphabet() {
    byte_of_.fill(-1);
    int next_extra = 256;
    for (int b = 0; b < 256; ++b) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int cp = printable ? b : next_extra++;
        std::string utf8;
        utf8_append(static_cast<char32_t>(cp), utf8);
        char_lengths_[b] = static_cast<uint8_t>(utf8.size());
        for (size_t i = 0; i < utf8.size(); ++i) chars_[b][i] = utf8[i];
        byte_of_[cp] = static_cast<int16_t>(b);
    }
}

void ByteLevelAlphabet::encode(std::string_view text, std::string& out) const {
    for (char c : text) out.append(char_of(static_cast<uint8_t>(c)));
}

bool ByteLevelAlphabet::decode(std::string_view token, std::string& out) const {
    size_t original_size = out.size();
    size_t pos = 0;
    while (pos < token.size()) {
        size_t n = utf8_valid_sequence_length(token, pos);
        char32_t cp = n == 0 ? 0xFFFFFFFF : utf8_decode(token, pos, &n);
        if (n == 0 || cp >= byte_of_.size() || byte_of_[cp] < 0) {
            out.resize(original_size);
            return false;
        }
        out.push_back(static_cast<char>(byte_of_[cp]));
        pos += n;
    }
    return true;
}

}  // namespace moeserve::tokenizer
