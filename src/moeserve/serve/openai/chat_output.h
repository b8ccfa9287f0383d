// One chat choice's text -> what the response says: reasoning (--reasoning-parser), then content
// or tool calls (--tool-call-parser for tool_choice auto; the forced shapes of required / named).
// Fed text deltas in order and told when the output ends; streaming and non-streaming responses
// both come from these deltas. gpt-oss's harmony output (reasoning openai_gptoss and/or tool
// parser openai) is read by one HarmonyParser: its channels give reasoning, content and calls.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moeserve/serve/openai/harmony_parser.h"
#include "moeserve/serve/openai/reasoning_parser.h"
#include "moeserve/serve/openai/tool_parser.h"
#include "moeserve/serve/openai/tools.h"

namespace moeserve::serve::openai {

struct ChatDelta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCallDelta> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct ChatOutputOptions {
    std::optional<ReasoningParser::Format> reasoning;  // none: no reasoning split
    ReasoningParser::Start reasoning_start = ReasoningParser::Start::kOpen;
    const ToolRequest* tools = nullptr;  // null or choice none: content only; must outlive this
    std::string tool_parser{};           // for choice auto: a name of tool_parser_names()
};

class ChatOutput {
public:
    explicit ChatOutput(const ChatOutputOptions& options);

    ChatDelta push(std::string_view text);
    ChatDelta finish();
    // Calls were found (finish_reason "tool_calls" when the output stopped, as vLLM says for
    // auto and required; a named choice keeps "stop").
    bool calls_made() const { return num_calls_ > 0; }
    bool named_choice() const { return options_.tools && options_.tools->choice == ToolRequest::Choice::kNamed; }

private:
    void add_content(std::string_view content, bool at_end, ChatDelta& out);

    ChatOutputOptions options_;
    ChatDelta from_harmony(HarmonyDelta d, bool at_end);

    std::unique_ptr<ReasoningParser> reasoning_;
    std::unique_ptr<HarmonyParser> harmony_;  // instead of reasoning_ (and parser_ for openai)
    std::unique_ptr<ToolParser> parser_;      // choice auto
    std::string forced_output_;               // choice required: the whole JSON list
    bool named_started_ = false;
    int32_t num_calls_ = 0;
};

}  // namespace moeserve::serve::openai
