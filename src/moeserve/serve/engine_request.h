// The one builder of engine requests from an OpenAI-shaped request: the HTTP routes
// (generate_route.cpp) and `generate --input` (cli/generate_batch.cpp) read a request's fields
// with the same reader (openai/parse.h), `generate --prompt` sets its flags' fields, and all turn
// GenerationParams and prompt token ids into ipc::AddRequests here, so a sampling field means
// the same everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/ipc/messages.h"
#include "moeserve/serve/openai/protocol.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::serve {

// What a prompt's engine request depends on besides the request's own fields.
struct EngineRequestRules {
    const openai::ModelLimits* limits = nullptr;  // max_model_len: the default max_tokens of chat
    std::optional<int32_t> default_max_tokens;    // generation_config.json's, where the request is silent
    bool chat = false;                            // chat's max_tokens default is the rest of the context
    bool echo_only = false;                       // completions echo with max_tokens 0: one token runs
    bool echo_logprobs = false;                   // completions echo with logprobs: the prompt's entries too
    std::vector<std::vector<int32_t>> bad_words;  // bad_words_token_ids of the request's words
    std::vector<int32_t> grammar_after;           // reasoning: the grammar starts after these ids
};

// vLLM's bad_words: each word as it would start a text and as a new word after a space (when
// that is a different, equally long token sequence).
std::vector<std::vector<int32_t>> bad_words_token_ids(const tokenizer::Tokenizer& tokenizer,
                                                      const std::vector<std::string>& words);

// truncate_prompt_tokens: keep the prompt's last k tokens.
void truncate_prompt(const openai::GenerationParams& p, std::vector<int32_t>& prompt_ids);

// The prompt's engine request, not yet validated (ipc::validate_request checks it against the
// model): every sampling field of p, max_tokens resolved. Its id is the caller's.
ipc::AddRequest build_engine_request(const openai::GenerationParams& p, const std::vector<int32_t>& prompt,
                                     const EngineRequestRules& rules);

// The k-th of a prompt's n choices: the prompt's request under `id`, with seed + k when the
// request has a seed (so the n samples differ and each is reproducible).
ipc::AddRequest choice_request(const ipc::AddRequest& prompt_request, const openai::GenerationParams& p, int32_t k,
                               std::string id);

}  // namespace moeserve::serve
