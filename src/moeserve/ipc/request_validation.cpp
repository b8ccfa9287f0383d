#include "moeserve/ipc/request_validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace moeserve::ipc {
namespace {

void check(bool ok, const char* param, const std::string& message) {
    if (!ok) throw InvalidRequest(param, message);
}

void check_ids(std::span<const TokenId> ids, const char* param, int64_t vocab_size) {
    for (const TokenId t : ids) {
        check(t >= 0 && t < vocab_size, param,
              fmt::format("'{}': token id {} is out of vocabulary (0..{})", param, t, vocab_size - 1));
    }
}

void add_once(std::vector<TokenId>& ids, TokenId t) {
    if (std::find(ids.begin(), ids.end(), t) == ids.end()) ids.push_back(t);
}

}  // namespace

AddRequest validate_request(AddRequest raw, bool ignore_eos, const RequestLimits& limits) {
    const SamplingParams& s = raw.sampling;
    const auto num_prompt = static_cast<int64_t>(raw.prompt_token_ids.size());
    check(num_prompt > 0, "prompt", "the prompt is empty; it needs at least one token");
    check(s.max_tokens >= 1, "max_tokens", fmt::format("'max_tokens' must be at least 1; got {}", s.max_tokens));
    check(num_prompt + s.max_tokens <= limits.max_model_len, "prompt",
          fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
                      "prompt, {} in the completion). Please reduce the length of the prompt or completion.",
                      limits.max_model_len, num_prompt + s.max_tokens, num_prompt, s.max_tokens));
    check(s.min_tokens >= 0, "min_tokens", fmt::format("'min_tokens' must be >= 0; got {}", s.min_tokens));
    check(s.min_tokens <= s.max_tokens, "min_tokens",
          fmt::format("'min_tokens' ({}) must be <= 'max_tokens' ({})", s.min_tokens, s.max_tokens));
    check(s.temperature >= 0, "temperature", fmt::format("'temperature' must be >= 0; got {}", s.temperature));
    check(s.top_p > 0 && s.top_p <= 1, "top_p", fmt::format("'top_p' must be in (0, 1]; got {}", s.top_p));
    check(s.top_k >= -1, "top_k", fmt::format("'top_k' must be -1 (off), 0 (off) or positive; got {}", s.top_k));
    check(s.min_p >= 0 && s.min_p <= 1, "min_p", fmt::format("'min_p' must be in [0, 1]; got {}", s.min_p));
    check(s.presence_penalty >= -2 && s.presence_penalty <= 2, "presence_penalty",
          fmt::format("'presence_penalty' must be in [-2, 2]; got {}", s.presence_penalty));
    check(s.frequency_penalty >= -2 && s.frequency_penalty <= 2, "frequency_penalty",
          fmt::format("'frequency_penalty' must be in [-2, 2]; got {}", s.frequency_penalty));
    check(s.repetition_penalty > 0 && s.repetition_penalty <= 2, "repetition_penalty",
          fmt::format("'repetition_penalty' must be in (0, 2]; got {}", s.repetition_penalty));
    for (const auto& [param, k] :
         {std::pair{"logprobs", s.logprobs}, std::pair{"prompt_logprobs", s.prompt_logprobs}}) {
        if (k) {
            check(*k >= 0 && *k <= limits.max_logprobs, param,
                  fmt::format("'{}' must be in [0, {}]; got {}", param, limits.max_logprobs, *k));
        }
    }
    check_ids(raw.prompt_token_ids, "prompt", limits.vocab_size);
    check_ids(s.stop_token_ids, "stop_token_ids", limits.vocab_size);
    for (const auto& [t, bias] : s.logit_bias) {
        check_ids(std::span<const TokenId>(&t, 1), "logit_bias", limits.vocab_size);
        check(std::isfinite(bias), "logit_bias", fmt::format("'logit_bias' of token {} must be finite", t));
    }
    check_ids(s.allowed_token_ids, "allowed_token_ids", limits.vocab_size);
    for (const auto& word : s.bad_words_token_ids) check_ids(word, "bad_words", limits.vocab_size);
    check_ids(s.grammar_after_token_ids, "response_format", limits.vocab_size);

    std::vector<TokenId> stop;
    stop.reserve(s.stop_token_ids.size() + limits.eos_token_ids.size());
    for (const TokenId t : s.stop_token_ids) add_once(stop, t);
    if (!ignore_eos) {
        for (const TokenId t : limits.eos_token_ids) add_once(stop, t);
    }
    raw.sampling.stop_token_ids = std::move(stop);
    return raw;
}

std::vector<TokenId> eos_token_set(std::span<const TokenId> config_eos, std::optional<TokenId> tokenizer_eos,
                                   std::span<const TokenId> generation_config_eos) {
    std::vector<TokenId> out;
    for (const TokenId t : config_eos) add_once(out, t);
    if (tokenizer_eos) add_once(out, *tokenizer_eos);
    for (const TokenId t : generation_config_eos) add_once(out, t);
    return out;
}

}  // namespace moeserve::ipc
