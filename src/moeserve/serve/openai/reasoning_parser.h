// Reasoning parsers (--reasoning-parser, vLLM's names): split a chat choice's generated text into
// reasoning (message.reasoning_content) and content at the model's <think> ... </think>, as the
// text streams (markers may be split across deltas). Both formats use the same markers and differ
// in what text that does not open with <think> is:
//   deepseek_r1  reasoning until </think> (R1 starts thinking without writing <think>)
//   qwen3        content (Qwen3 writes <think> itself when it thinks)
// Where the prompt stands decides the start: a template that opened <think> (R1's, Qwen3
// thinking-only models) means the output is reasoning from its first byte; one that closed it
// (Qwen3 with enable_thinking false) means content only. Reasoning the model never closes stays
// reasoning (streamed as such; the non-streaming answer agrees).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::serve::openai {

inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";

struct ReasoningDelta {
    std::string reasoning;
    std::string content;
};

class HarmonyParser;

class ReasoningParser {
public:
    enum class Format { kDeepSeekR1, kQwen3, kGptOss };
    enum class Start { kOpen, kReasoning, kContent };  // before any marker / in reasoning / after it

    ReasoningParser(Format format, Start start);
    ~ReasoningParser();
    ReasoningParser(ReasoningParser&&) noexcept;
    ReasoningParser& operator=(ReasoningParser&&) noexcept;

    // Feeds the next generated text; returns what can be released now.
    ReasoningDelta push(std::string_view text);
    // The output ended: releases what was held back.
    ReasoningDelta finish();
    // The output has left the reasoning (the content that follows is what a grammar constrains).
    bool in_content() const { return state_ == Start::kContent; }

    // Where a prompt leaves the model: ends (but for spaces) with <think> -> kReasoning, with
    // </think> -> kContent, else kOpen.
    static Start start_of(std::string_view prompt_text);

private:
    ReasoningDelta advance(bool at_end);

    Format format_;
    Start state_;
    std::string buffer_;
    std::unique_ptr<HarmonyParser> harmony_;  // kGptOss only
};

std::vector<std::string> reasoning_parser_names();
// nullopt-like: false for an unknown name.
bool reasoning_format_of(const std::string& name, ReasoningParser::Format& format);

}  // namespace moeserve::serve::openai
