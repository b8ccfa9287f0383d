// Tool-call parsers (--tool-call-parser, vLLM's names): they split a chat choice's generated text
// into content and function calls as it streams. One parser per choice, fed text deltas in order
// (any split, even inside a marker) and told when the output ends; the same code path serves
// streaming and non-streaming responses, so both see the same calls.
//   hermes       Qwen3 / Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//   deepseek_v3  DeepSeek-V3/R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//                \n```json\nARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   kimi_k2      Kimi-K2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:I
//                <|tool_call_argument_begin|>ARGS<|tool_call_end|>...<|tool_calls_section_end|>
//   glm45        GLM-4.5 / 4.6: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...
//                </tool_call> (values typed by the tool's schema)
//   openai       gpt-oss (harmony, harmony_parser.h): <|channel|>commentary to=functions.NAME
//                <|constrain|>json<|message|>ARGS<|call|>; final and commentary text is content,
//                analysis is dropped (the openai_gptoss reasoning parser returns it)
// Text outside calls before the first call is content; after the first call it is dropped (as
// vLLM's non-streaming parsers do). A call whose text is not what the format says is returned as
// content when nothing of it was streamed yet.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::serve::openai {

// A fragment of one call (OpenAI's delta.tool_calls[i]): the first fragment of a call carries
// its id and name; the arguments of all its fragments concatenate to the call's JSON arguments.
struct ToolCallDelta {
    int32_t index = 0;  // the call's position in the choice
    std::optional<std::string> id;
    std::optional<std::string> name;
    std::string arguments;
};

struct ToolParseDelta {
    std::string content;
    std::vector<ToolCallDelta> calls;
    bool empty() const { return content.empty() && calls.empty(); }
};

// A whole call (non-streaming responses, and forced calls of tool_choice required / named).
struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // JSON text
};

class ToolParser {
public:
    virtual ~ToolParser() = default;
    // Feeds the next generated text; returns what can be released now.
    virtual ToolParseDelta push(std::string_view text) = 0;
    // The output ended: releases what was held back (an unclosed call is parsed as far as it goes).
    virtual ToolParseDelta finish() = 0;
    // Calls found so far (complete ones only).
    int32_t num_calls() const { return num_calls_; }

protected:
    int32_t num_calls_ = 0;
};

// The parser names known here; make_tool_parser accepts exactly these.
std::vector<std::string> tool_parser_names();
// nullptr for an unknown name. tools: the request's validated list (OpenAI shape), which glm45
// reads to type the arguments; may be null; must outlive the parser.
std::unique_ptr<ToolParser> make_tool_parser(const std::string& name, const nlohmann::ordered_json* tools = nullptr);

// Whether the parser's markers are special tokens of its model's tokenizer (kimi_k2, openai): the
// output must then be detokenized with skip_special_tokens off for the parser to see them.
bool tool_parser_reads_special_tokens(const std::string& name);

// An OpenAI-shaped call id: "call_" + 24 random alphanumerics (vLLM's "chatcmpl-tool-" style ids
// are accepted by clients too; the SDK only echoes them back).
std::string new_tool_call_id();

// Folds a stream of deltas into whole calls (index order) and the content.
struct ToolParseResult {
    std::string content;
    std::vector<ToolCall> calls;
    void add(const ToolParseDelta& delta);
};

}  // namespace moeserve::serve::openai
