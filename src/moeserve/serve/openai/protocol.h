// OpenAI (and vLLM-extra) request types of the server, after parsing and validation, and the
// error type routes turn into {"error": {"message", "type", "param", "code"}}. Plain structs:
// parse.cpp builds them from JSON, render.cpp writes responses. No I/O, no engine types.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/serve/openai/tools.h"

namespace moeserve::serve::openai {

using TokenId = int32_t;

// A request the client got wrong (or a server state it must know about), with the HTTP status
// and OpenAI's error fields. Thrown by parse/validation, caught by the route.
class ApiError : public Error {
public:
    ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
             std::optional<std::string> param = std::nullopt, std::optional<std::string> code = std::nullopt)
        : Error(status >= 500 ? ErrorCode::kUnavailable : ErrorCode::kInvalidArgument, message),
          message_(message),
          status_(status),
          type_(std::move(type)),
          param_(std::move(param)),
          code_(std::move(code)) {}
    int status() const { return status_; }
    // The whole message: what() stops at a NUL, which a client's own text (a model name) may hold.
    const std::string& message() const { return message_; }
    const std::string& type() const { return type_; }
    const std::optional<std::string>& param() const { return param_; }
    const std::optional<std::string>& code() const { return code_; }

private:
    std::string message_;
    int status_;
    std::string type_;
    std::optional<std::string> param_;
    std::optional<std::string> code_;
};

// What the server knows about the model when it validates a request.
struct ModelLimits {
    std::string served_model_name;  // the name responses report
    int64_t max_model_len = 4096;
    int32_t vocab_size = 0;                       // token ids must be in [0, vocab_size)
    std::vector<std::string> model_aliases = {};  // more names requests may use (--served-model-name a b)
    int32_t max_logprobs = 20;  // logprobs / top_logprobs / prompt_logprobs at most (--max-logprobs; vLLM's default)
};

// Sampling and output options shared by both endpoints (OpenAI's plus vLLM's extras).
struct GenerationParams {
    int32_t n = 1;
    std::optional<int32_t> max_tokens;  // completions default 16; chat: up to max-model-len
    float temperature = 1.0f;
    float top_p = 1.0f;
    int32_t top_k = 0;  // 0 = off (vLLM's -1 maps here)
    float min_p = 0.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repetition_penalty = 1.0f;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    std::vector<TokenId> stop_token_ids;
    bool ignore_eos = false;
    int32_t min_tokens = 0;
    bool skip_special_tokens = true;
    bool include_stop_str_in_output = false;
    bool stream = false;
    bool include_usage = false;              // stream_options.include_usage
    bool continuous_usage_stats = false;     // stream_options.continuous_usage_stats (vLLM)
    std::optional<int32_t> logprobs;         // top-k per token (chat: top_logprobs when logprobs)
    std::optional<int32_t> prompt_logprobs;  // top-k per prompt token (vLLM)
    std::string grammar;  // structured outputs: GBNF the output must match (structured_output_parse.h)
    // vLLM's logits processors: bias per token id (clamped to [-100, 100]), the only ids allowed,
    // words never to generate (the route turns them into token sequences).
    std::vector<std::pair<TokenId, float>> logit_bias;
    std::vector<TokenId> allowed_token_ids;
    std::vector<std::string> bad_words;
    std::optional<int32_t> truncate_prompt_tokens;  // keep only the prompt's last k tokens
    std::string cache_salt;                         // prefix-cache namespace
    std::string request_id;                         // the client's: the response id is <prefix>-<it>
    int32_t priority = 0;                           // --scheduling-policy priority: lower first
    // vLLM's kv_transfer_params (PD disaggregation, docs/parallelism.md): produce = the prefill
    // half ({"do_remote_decode": true}); transfers = the decode half, where each choice's KV waits
    // ({"do_remote_prefill": true, "transfers": [{"endpoint", "id", "token"}, ...]}, as the prefill
    // answered; the token is ipc::kv_transfer_token, checked before anything is fetched).
    struct KvTransfer {
        struct Source {
            std::string endpoint, id, token;
        };
        bool produce = false;
        std::vector<Source> transfers;  // per choice
    };
    KvTransfer kv_transfer;
};

// One prompt of /v1/completions: text, or token ids given by the client.
struct PromptInput {
    std::optional<std::string> text;
    std::vector<TokenId> token_ids;  // when text is empty: the client's ids
};

struct CompletionRequest {
    std::string model;
    std::vector<PromptInput> prompts;
    bool echo = false;
    GenerationParams params;
    std::vector<std::string> unknown_fields;  // accepted and ignored (vLLM's leniency); the route logs them
};

struct ChatCompletionRequest {
    std::string model;
    nlohmann::ordered_json messages;  // as given (prepare_chat_messages validated it)
    bool add_generation_prompt = true;
    bool continue_final_message = false;
    bool add_special_tokens = false;  // encode the rendered prompt with BOS/EOS rules (vLLM)
    bool echo = false;                // the answer starts with the last message when it is the assistant's
    std::string chat_template;        // this request's template (vLLM's chat_template field); empty = the server's
    ToolRequest tools;
    nlohmann::ordered_json chat_template_kwargs;  // object (maybe empty)
    GenerationParams params;
    std::vector<std::string> unknown_fields;
};

struct TokenizeRequest {
    std::optional<std::string> prompt;
    nlohmann::ordered_json messages;  // when prompt is absent
    nlohmann::ordered_json tools;     // rendered with the messages; null when absent
    bool add_special_tokens = true;
    bool add_generation_prompt = true;
    bool continue_final_message = false;
    bool return_token_strs = false;
    nlohmann::ordered_json chat_template_kwargs;
    std::vector<std::string> unknown_fields;
};

struct DetokenizeRequest {
    std::vector<TokenId> tokens;
};

}  // namespace moeserve::serve::openai
