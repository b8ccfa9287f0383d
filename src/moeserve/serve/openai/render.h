// Protocol structs -> OpenAI JSON responses and SSE chunks (completions, chat completions, their
// streaming chunks, usage, logprobs, errors). Pure functions; no tokenizer, no I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moeserve/serve/openai/protocol.h"
#include "moeserve/serve/openai/tool_parser.h"

namespace moeserve::serve::openai {

using OJson = nlohmann::ordered_json;

struct TokenLogprob {
    std::string token;  // its text
    float logprob = 0;
    std::vector<std::pair<std::string, float>> top;  // most likely first
    bool unknown = false;                            // the prompt's first token (echo): logprob and top are null
};

// One choice's output so far (non-streaming) or its delta (streaming).
struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;
};

struct ChoiceData {
    int32_t index = 0;
    std::string text;                          // chat: the content
    std::optional<std::string> finish_reason;  // "stop" | "length" | "abort" | "tool_calls" (null while running)
    OJson stop_reason;                         // null | the stop string | the stop token id
    bool has_logprobs = false;
    std::vector<TokenLogprob> logprobs;
    int64_t text_offset = 0;  // completions: offset (in characters) of this text in the choice's whole text
    // Chat: reasoning (rendered as reasoning_content and reasoning when a reasoning parser runs),
    // the calls of a response and the call fragments of a chunk.
    bool has_reasoning = false;
    std::string reasoning;
    std::vector<ToolCall> tool_calls;
    std::vector<ToolCallDelta> tool_call_deltas;
    OJson prompt_logprobs;       // null, or vLLM's list (null first, then {id: {logprob, rank, decoded_token}})
    std::optional<Usage> usage;  // a chunk's usage so far (stream_options.continuous_usage_stats)
};

struct ResponseMeta {
    std::string id;
    int64_t created = 0;  // unix seconds
    std::string model;
};

// Characters (code points) of UTF-8 text, as Python's len(): OpenAI's text_offset unit. A byte
// of a broken sequence counts as one.
int64_t utf8_length(std::string_view text);

// {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ApiError& error);

OJson completion_response(const ResponseMeta& meta, const std::vector<ChoiceData>& choices, const Usage& usage);
OJson completion_chunk(const ResponseMeta& meta, const ChoiceData& delta);
OJson chat_response(const ResponseMeta& meta, const std::vector<ChoiceData>& choices, const Usage& usage);
// first: the choice's first chunk (carries role "assistant").
OJson chat_chunk(const ResponseMeta& meta, const ChoiceData& delta, bool first);
// The final chunk with usage and empty choices (stream_options.include_usage).
OJson usage_chunk(const ResponseMeta& meta, const Usage& usage, bool chat);
OJson usage_json(const Usage& usage);

// "data: <json>\n\n" and "data: [DONE]\n\n".
std::string sse_event(const OJson& json);
std::string sse_done();

}  // namespace moeserve::serve::openai
