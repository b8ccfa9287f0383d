// Small text helpers the streaming parsers share (tool calls, reasoning).
#pragma once

#include <algorithm>
#include <string_view>

namespace moeserve::serve::openai {

inline bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Length of the longest suffix of text that is a proper prefix of marker: text a streaming parser
// must hold back until the next delta says whether the marker follows.
inline size_t partial_marker(std::string_view text, std::string_view marker) {
    for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
        if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
    }
    return 0;
}

}  // namespace moeserve::serve::openai
