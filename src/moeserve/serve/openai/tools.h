// The tools part of a chat request: `tools` (function definitions), `tool_choice` (none | auto |
// required | a named function) and `parallel_tool_calls`, validated as vLLM does; and what a
// forced choice (required, named) means for decoding: a grammar over the functions' parameter
// schemas (vLLM's shapes: required = a JSON list of {"name", "parameters"} objects, named = the
// function's arguments object) and how its output becomes calls.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moeserve/serve/openai/tool_parser.h"

namespace moeserve::serve::openai {

struct ToolRequest {
    enum class Choice { kNone, kAuto, kRequired, kNamed };
    nlohmann::ordered_json tools;   // the validated list; null when the request has none
    Choice choice = Choice::kNone;  // default: auto when tools are given, else none
    std::string named;              // the function of Choice::kNamed
    bool parallel_tool_calls = true;

    bool forced() const { return choice == Choice::kRequired || choice == Choice::kNamed; }
};

// Reads tools / tool_choice / parallel_tool_calls of a chat body. ApiError 400 naming the field for
// malformed tools, an unknown choice, a named function that is not in tools, or a choice other
// than none without tools.
ToolRequest parse_tool_request(const nlohmann::ordered_json& body);

// The GBNF a forced choice's output must match (ApiError 400 if a function's parameters are not a
// supported JSON Schema). Only for forced() requests.
std::string forced_tool_grammar(const ToolRequest& request);

// The calls a forced choice's (grammar-constrained) output stands for; empty if the output did not
// finish (cut by max_tokens).
std::vector<ToolCall> forced_tool_calls(const ToolRequest& request, const std::string& output);

}  // namespace moeserve::serve::openai
