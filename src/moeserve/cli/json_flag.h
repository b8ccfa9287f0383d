// Flags whose value is a JSON object, as vLLM takes them (--kv-transfer-config,
// --speculative-config).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace moeserve::cli {

// The object `text` holds. Throws kInvalidArgument as one line naming `flag` ("--flag: not valid
// JSON: ..." / "--flag: expected a JSON object") otherwise.
nlohmann::json parse_json_object_flag(const std::string& flag, const std::string& text);

}  // namespace moeserve::cli
