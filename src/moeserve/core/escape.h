// Backslash escapes for a string shown inside quotes or on one line: Python's repr of a chat
// template string, a grammar's literal, a name from a file in an error message.
#pragma once

#include <string>
#include <string_view>

namespace moeserve {

// Appends s to out with the backslash and `quote` (unless it is '\0') escaped, \n \r \t as such and
// the other control bytes and DEL as \xNN (lower-case hex, as Python writes them); every other byte
// as it is, so UTF-8 text stays readable. Reading the escapes back gives s again.
void append_escaped(std::string_view s, char quote, std::string& out);

// s between two `quote` characters, escaped as append_escaped does.
std::string quote_escaped(std::string_view s, char quote);

}  // namespace moeserve
