// The front ends of structured outputs: each turns one kind of constraint into GBNF text (the one
// dialect the engine compiles), raising Error kInvalidArgument whose message starts with the
// path of the offending part (e.g. "response_format.json_schema.schema.properties.age:
// unsupported type 'foo'"). Output JSON is compact (no whitespace between tokens), strings are
// any JSON string unless bounded, integers have at most 16 digits, fractions at most 16.
// Depends on core and nlohmann-json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::structured {

// A JSON Schema (the subset docs/serving.md lists). Properties keep the schema's order.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const std::string& path);

// The same as rules to embed in a larger grammar (tool calls): defines `rule_name` instead of
// root, its helper rules named `<rule_name>-...`, and the shared json-* / fmt-* primitives
// (identical in every output, so merge_gbnf can combine several).
std::string json_schema_to_gbnf_rules(const nlohmann::ordered_json& schema, const std::string& path,
                                      const std::string& rule_name);

// Concatenates one-rule-per-line GBNF texts made by these converters, keeping one copy of a rule
// defined identically in several; Error kInvalidArgument if a name is defined differently.
std::string merge_gbnf(const std::vector<std::string>& parts);

// Any JSON object (response_format json_object).
std::string json_object_gbnf();

// A regular expression matched against the whole output (Python/ECMAScript syntax subset:
// literals, escapes, classes, . | () (?:) * + ? {m,n}; no backreferences or lookaround).
std::string regex_to_gbnf(std::string_view regex, const std::string& path);

// Exactly one of the choices.
std::string choices_to_gbnf(const std::vector<std::string>& choices, const std::string& path);

// A user's GBNF grammar, checked (parse_gbnf, then the expansion of its start) and returned
// unchanged; the error names path.
std::string checked_gbnf(const std::string& gbnf, const std::string& path);

// Internal to the converters, exposed for tests: a GBNF expression matching the regex; inside a
// JSON string (json_string) characters that JSON must escape are written escaped, and classes
// leave out '"', '\' and control characters.
std::string regex_expression(std::string_view regex, bool json_string, const std::string& path);
// A GBNF expression of the decimal integers in [lo, hi] (no leading zeros; "-0" excluded).
std::string integer_range_expression(int64_t lo, int64_t hi);

}  // namespace moeserve::structured
