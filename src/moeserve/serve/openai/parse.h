// JSON request bodies -> protocol structs, with OpenAI-shaped 400 errors naming the offending
// parameter. Never crashes on any input (fuzz/openai_request_fuzz.cpp). The sampling values and
// token ids are checked later, once per engine request, by ipc::validate_request.
#pragma once

#include <string_view>

#include "moeserve/serve/openai/protocol.h"

namespace moeserve::serve::openai {

// Parses body as a JSON object (keys kept in order). ApiError 400 for invalid JSON, a non-object
// or nesting deeper than 64 levels.
nlohmann::ordered_json parse_body(std::string_view body);

// ApiError 400 for a wrong type or a broken rule of the HTTP request (param names the field) and
// 404 for another model. Fields nobody knows are accepted and listed in unknown_fields (vLLM warns and goes on).
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, const ModelLimits& limits);
ChatCompletionRequest parse_chat_request(const nlohmann::ordered_json& body, const ModelLimits& limits);
TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body, const ModelLimits& limits);
DetokenizeRequest parse_detokenize_request(const nlohmann::ordered_json& body, const ModelLimits& limits);

// The max_tokens to use for a prompt of num_prompt_tokens: params.max_tokens, or (unset) 16
// for completions and the rest of the context (at least 1) for chat. Whether prompt +
// max_tokens fit max_model_len is ipc::validate_request's rule.
int32_t resolve_max_tokens(int64_t num_prompt_tokens, const GenerationParams& params, const ModelLimits& limits,
                           bool chat);

}  // namespace moeserve::serve::openai
