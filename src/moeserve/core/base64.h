// Standard base64 (RFC 4648, '+' and '/', '=' padding): tiktoken.model files write each token's
// bytes this way. Depends on std only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moeserve {

// The bytes `text` encodes, or nullopt when it is not canonical padded base64 (a length that is
// not a multiple of 4, a character outside the alphabet, padding anywhere but the end).
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace moeserve
