// Structured-output request fields -> the GBNF grammar the engine enforces: OpenAI's
// response_format (text | json_object | json_schema), vLLM's guided_json / guided_regex /
// guided_choice / guided_grammar and structured_outputs {json, regex, choice, grammar,
// json_object}. Errors are ApiError 400 whose message starts with the path of what is wrong.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace moeserve::serve::openai {

// The request fields read here (the caller marks them as known).
inline constexpr const char* kStructuredOutputFields[] = {"response_format",
                                                          "guided_json",
                                                          "guided_regex",
                                                          "guided_choice",
                                                          "guided_grammar",
                                                          "guided_decoding_backend",
                                                          "guided_whitespace_pattern",
                                                          "structured_outputs"};

// The grammar of body's structured-output fields; empty when there are none (or
// response_format is {"type": "text"}). ApiError 400 for a malformed or unsupported spec, or
// for more than one constraint.
std::string parse_structured_output(const nlohmann::ordered_json& body);

}  // namespace moeserve::serve::openai
