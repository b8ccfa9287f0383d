// Protocol structs -> OpenAI JSON responses and SSE chunks (completions, chat completions, their
// streaming chunks, usage, logprobs, errors). Pure functions; no tokenizer, no I/O.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moeserve/serve/openai/protocol.h"

namespace moeserve::serve::openai {

using OJson = nlohmann::ordered_json;

struct TokenLogprob {
    std::string token;  // its text
    float logprob = 0;
    std::vector<std::pair<std::string, float>> top;  // most likely first
};

// One choice's output so far (non-streaming) or its delta (streaming).
struct ChoiceData {
    int32_t index = 0;
    std::string text;
    std::optional<std::string> finish_reason;  // "stop" | "length" | "abort" (null while running)
    OJson stop_reason;                         // null | the stop string | the stop token id
    bool has_logprobs = false;
    std::vector<TokenLogprob> logprobs;
    int64_t text_offset = 0;  // completions: offset of this text in the choice's whole text
};

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;
};

struct ResponseMeta {
    std::string id;
    int64_t created = 0;  // unix seconds
    std::string model;
};

// {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ApiError& error);

OJson completion_response(const ResponseMeta& meta, const std::vector<ChoiceData>& choices,
                          const Usage& usage);
OJson completion_chunk(const ResponseMeta& meta, const ChoiceData& delta);
OJson chat_response(const ResponseMeta& meta, const std::vector<ChoiceData>& choices,
                    const Usage& usage);
// first: the choice's first chunk (carries role "assistant").
OJson chat_chunk(const ResponseMeta& meta, const ChoiceData& delta, bool first);
// The final chunk with usage and empty choices (stream_options.include_usage).
OJson usage_chunk(const ResponseMeta& meta, const Usage& usage, bool chat);
OJson usage_json(const Usage& usage);

// "data: <json>\n\n" and "data: [DONE]\n\n".
std::string sse_event(const OJson& json);
std::string sse_done();

}  // namespace moeserve::serve::openai
