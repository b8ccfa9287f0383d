// The line vLLM's --enable-log-requests writes when a request arrives: its id, the prompt (text
// and token ids, each cut to --max-log-len as vLLM's RequestLogger cuts them) and the sampling
// parameters. Pure formatting; the route decides when to log. Depends on serve/openai only.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "moeserve/serve/openai/protocol.h"

namespace moeserve::serve {

// "received request ID: prompt: \"...\", params: SamplingParams(n=1, ...), prompt_token_ids: [..]".
// prompt: the text the ids came from (the rendered chat prompt, a completion's text), or nullopt
// when the client sent ids (logged as null). The text is JSON-escaped so the line stays one line.
// max_log_len < 0: no cut; else at most that many code points of the text and that many ids.
// max_tokens: the resolved output budget (the request's own may be absent).
std::string request_log_line(const std::string& id, const std::optional<std::string>& prompt,
                             std::span<const openai::TokenId> prompt_token_ids, const openai::GenerationParams& params,
                             int32_t max_tokens, int max_log_len);

}  // namespace moeserve::serve
