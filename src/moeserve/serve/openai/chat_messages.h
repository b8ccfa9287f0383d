// Chat history as vLLM prepares it for the template: validated messages with text content
// (lists of text parts joined by "\n", null or absent content as ""), assistant tool_calls with
// their arguments as JSON text (a string is checked to be JSON, an object is written out), tool
// results with their tool_call_id. Only the fields templates read are kept (role, content, name,
// tool_calls, tool_call_id, reasoning_content, thinking). An assistant turn's reasoning
// (reasoning_content or reasoning) is also given as `thinking`, the field gpt-oss's template reads.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace moeserve::serve::openai {

enum class NullContent {
    kEmpty,              // vLLM: null / absent content becomes ""
    kKeepWithToolCalls,  // except on assistant messages with tool_calls, which keep null
};

enum class ToolArguments {
    kText,    // arguments as JSON text (templates that print or concatenate them)
    kObject,  // arguments that are a JSON object as that object (templates that apply tojson)
};

// ApiError 400 (param "messages", the message naming the index and field) for a malformed history.
nlohmann::ordered_json prepare_chat_messages(const nlohmann::ordered_json* messages,
                                             NullContent null_content = NullContent::kEmpty,
                                             ToolArguments arguments = ToolArguments::kText);

// Whether a chat template writes tool-call arguments only through `| tojson` (gpt-oss's): such a
// template wants them as objects, as transformers passes them; one that also handles strings
// (Qwen3's `is string`) or concatenates them (DeepSeek-V3's) gets the text.
bool template_wants_argument_objects(std::string_view template_source);

// True if some assistant message has tool_calls and no content: the templates disagree on how
// to read those (DeepSeek-V3's renders the calls only when content is none, Qwen3's needs a
// string), so the router tries kKeepWithToolCalls first and falls back to kEmpty.
bool has_tool_calls_without_content(const nlohmann::ordered_json& messages);

}  // namespace moeserve::serve::openai
