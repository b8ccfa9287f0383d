// The one owner of a generation request's rules (docs/architecture.md, "The request path through the API server"):
// every boundary that makes an AddRequest (the HTTP routes, `generate --input`, `generate
// --prompt`) passes it through validate_request() once; the engine trusts what arrives (it keeps
// only the checks it alone can make: duplicate ids, KV capacity, grammars, its KV-transfer role).
// Depends on core and the ipc message types only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/ipc/messages.h"

namespace moeserve::ipc {

// What a request is checked against, fixed at startup.
struct RequestLimits {
    int64_t max_model_len = 4096;  // prompt + max_tokens at most
    int64_t vocab_size = 0;        // every token id must be in [0, vocab_size)
    int32_t max_logprobs = 20;     // logprobs and prompt_logprobs at most (--max-logprobs)
    // The model's EOS set (model_eos_token_ids in cli/generation_config.h): added to a request's
    // stop_token_ids unless it asks for ignore_eos.
    std::vector<TokenId> eos_token_ids{};
};

// A request that breaks a rule: the field (its OpenAI name) and a sentence saying what was wrong.
class InvalidRequest : public Error {
public:
    InvalidRequest(std::string param, const std::string& message)
        : Error(ErrorCode::kInvalidArgument, message), param_(std::move(param)) {}
    const std::string& param() const { return param_; }

private:
    std::string param_;
};

// Checks raw against every rule and returns it as the engine runs it: stop_token_ids gain the EOS
// set unless ignore_eos, each id once (a stop token equal to an EOS id stays one entry). The
// rules: a non-empty prompt; prompt + max_tokens <= max_model_len; max_tokens >= 1; min_tokens in
// [0, max_tokens]; temperature >= 0; top_p in (0, 1]; top_k -1, 0 (off) or positive; min_p in
// [0, 1]; presence/frequency penalties in [-2, 2]; repetition_penalty in (0, 2]; logprobs and
// prompt_logprobs in [0, max_logprobs]; finite logit biases; every token id (prompt, stop ids,
// logit_bias, allowed_token_ids, bad words, grammar_after_token_ids) in the vocabulary. Throws
// InvalidRequest naming the first field that breaks one. Thread-safe (pure).
AddRequest validate_request(AddRequest raw, bool ignore_eos, const RequestLimits& limits);

// The model's EOS set: config.json's eos_token_id (int or list), then the tokenizer's EOS token,
// then generation_config.json's eos_token_id, each id once in that order.
std::vector<TokenId> eos_token_set(std::span<const TokenId> config_eos, std::optional<TokenId> tokenizer_eos,
                                   std::span<const TokenId> generation_config_eos);

}  // namespace moeserve::ipc
