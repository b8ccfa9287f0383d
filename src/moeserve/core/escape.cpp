#include "moeserve/core/escape.h"

#include <fmt/format.h>

namespace moeserve {

void append_escaped(std::string_view s, char quote, std::string& out) {
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (ch == '\\' || (quote != '\0' && ch == quote)) {
            out += '\\';
            out += ch;
        } else if (ch == '\n') {
            out += "\\n";
        } else if (ch == '\r') {
            out += "\\r";
        } else if (ch == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else {
            out += ch;
        }
    }
}

std::string quote_escaped(std::string_view s, char quote) {
    std::string out(1, quote);
    append_escaped(s, quote, out);
    out += quote;
    return out;
}

}  // namespace moeserve
