// The harmony format of OpenAI's gpt-oss models, read from the streamed output text (the
// detokenizer must keep special tokens: the markers are special tokens). The prompt ends with
// `<|start|>assistant`; the output is one or more messages
//     HEADER <|message|> BODY TERMINATOR
// where a later message starts with `<|start|>assistant`, the terminator is <|end|> (more
// follows), <|call|> (a tool call, generation stops) or <|return|> (done), and the header names a
// channel (`<|channel|>analysis`, `commentary`, `final`), maybe a recipient (`to=functions.NAME`,
// before or after the channel) and a content type (`<|constrain|>json` or a bare `json`):
//     <|channel|>analysis<|message|>THOUGHTS<|end|><|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
//     <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
// Routing, as vLLM's openai_gptoss / openai parsers do: analysis -> reasoning; a message to
// functions.NAME -> a tool call (its body is the JSON arguments); final, and commentary without a
// recipient (a preamble before calls) -> content; messages to other recipients (built-in tools) ->
// reasoning. Text with no harmony marker at all (a model that did not write the format) is content.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moeserve/serve/openai/tool_parser.h"

namespace moeserve::serve::openai {

// What precedes the final answer; a structured output's grammar starts after it.
inline constexpr std::string_view kHarmonyFinalHeader = "<|channel|>final<|message|>";

struct HarmonyDelta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCallDelta> calls;
};

class HarmonyParser {
public:
    struct Options {
        bool reasoning = true;   // analysis -> reasoning (else dropped)
        bool tool_calls = true;  // functions.NAME messages -> calls (else dropped)
    };
    explicit HarmonyParser(Options options) : options_(options) {}

    // Feeds the next generated text (any split, markers included); returns what can be released.
    HarmonyDelta push(std::string_view text);
    // The output ended: releases what was held back; an unterminated message ends here.
    HarmonyDelta finish();
    int32_t num_calls() const { return num_calls_; }

private:
    enum class State { kHeader, kBody, kBetween };
    enum class Route { kReasoning, kContent, kCall, kDrop };

    HarmonyDelta advance(bool at_end);
    // Each returns false when it must wait for more text.
    bool read_header(bool at_end, HarmonyDelta& out);
    bool read_body(bool at_end, HarmonyDelta& out);
    bool read_between(bool at_end);
    void open_message(std::string_view header, HarmonyDelta& out);
    void emit_body(std::string_view text, HarmonyDelta& out);
    void close_message(HarmonyDelta& out);

    Options options_;
    State state_ = State::kHeader;  // the prompt ends with <|start|>assistant
    Route route_ = Route::kDrop;
    std::string buffer_;     // text not yet consumed
    std::string call_text_;  // the current call's body so far
    size_t args_sent_ = 0;   // bytes of the trimmed call body already released
    int32_t num_calls_ = 0;
};

}  // namespace moeserve::serve::openai
