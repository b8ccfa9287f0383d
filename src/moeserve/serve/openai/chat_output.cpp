#include "moeserve/serve/openai/chat_output.h"

namespace moeserve::serve::openai {

ChatOutput::ChatOutput(const ChatOutputOptions& options) : options_(options) {
    const bool auto_calls = options_.tools && options_.tools->choice == ToolRequest::Choice::kAuto;
    const bool harmony_calls = auto_calls && options_.tool_parser == "openai";
    const bool harmony_reasoning = options_.reasoning == ReasoningParser::Format::kGptOss;
    if (harmony_calls || harmony_reasoning) {
        harmony_ = std::make_unique<HarmonyParser>(
            HarmonyParser::Options{.reasoning = harmony_reasoning, .tool_calls = harmony_calls});
    } else if (options_.reasoning) {
        reasoning_ = std::make_unique<ReasoningParser>(*options_.reasoning, options_.reasoning_start);
    }
    if (auto_calls && !harmony_calls) parser_ = make_tool_parser(options_.tool_parser, &options_.tools->tools);
}

ChatDelta ChatOutput::from_harmony(HarmonyDelta d, bool at_end) {
    ChatDelta out;
    out.reasoning = std::move(d.reasoning);
    add_content(d.content, at_end, out);  // the forced tool choices read the final channel's text
    if (!d.calls.empty()) {
        out.tool_calls.insert(out.tool_calls.end(), d.calls.begin(), d.calls.end());
        num_calls_ = harmony_->num_calls();
    }
    return out;
}

ChatDelta ChatOutput::push(std::string_view text) {
    if (harmony_) return from_harmony(harmony_->push(text), false);
    ChatDelta out;
    if (!reasoning_) {
        add_content(text, false, out);
        return out;
    }
    ReasoningDelta r = reasoning_->push(text);
    out.reasoning = std::move(r.reasoning);
    add_content(r.content, false, out);
    return out;
}

ChatDelta ChatOutput::finish() {
    if (harmony_) return from_harmony(harmony_->finish(), true);
    ChatDelta out;
    if (reasoning_) {
        ReasoningDelta r = reasoning_->finish();
        out.reasoning = std::move(r.reasoning);
        add_content(r.content, true, out);
    } else {
        add_content("", true, out);
    }
    return out;
}

void ChatOutput::add_content(std::string_view content, bool at_end, ChatDelta& out) {
    const ToolRequest* tools = options_.tools;
    if (parser_) {
        ToolParseDelta d = parser_->push(content);
        if (at_end) {
            ToolParseDelta rest = parser_->finish();
            d.content += rest.content;
            d.calls.insert(d.calls.end(), rest.calls.begin(), rest.calls.end());
        }
        out.content += d.content;
        out.tool_calls = std::move(d.calls);
        num_calls_ = parser_->num_calls();
        return;
    }
    if (tools && tools->choice == ToolRequest::Choice::kNamed) {
        // The output is the arguments object itself: stream it as the one call's arguments.
        if (!named_started_ && (!content.empty() || at_end)) {
            out.tool_calls.push_back({0, new_tool_call_id(), tools->named, ""});
            named_started_ = true;
            num_calls_ = 1;
        }
        if (!content.empty()) out.tool_calls.push_back({0, std::nullopt, std::nullopt, std::string(content)});
        return;
    }
    if (tools && tools->choice == ToolRequest::Choice::kRequired) {
        // A JSON list of calls, complete only at the end.
        forced_output_ += content;
        if (!at_end) return;
        const auto calls = forced_tool_calls(*tools, forced_output_);
        for (size_t i = 0; i < calls.size(); ++i) {
            out.tool_calls.push_back({static_cast<int32_t>(i), calls[i].id, calls[i].name, calls[i].arguments});
        }
        num_calls_ = static_cast<int32_t>(calls.size());
        return;
    }
    out.content += content;
}

}  // namespace moeserve::serve::openai
