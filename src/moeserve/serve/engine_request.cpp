#include "moeserve/serve/engine_request.h"

#include <algorithm>

#include "moeserve/serve/openai/parse.h"

namespace moeserve::serve {

std::vector<std::vector<int32_t>> bad_words_token_ids(const tokenizer::Tokenizer& tokenizer,
                                                      const std::vector<std::string>& words) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& word : words) {
        std::string trimmed = word;
        trimmed.erase(0, trimmed.find_first_not_of(' '));
        const auto plain = tokenizer.encode(trimmed, false);
        if (!plain.empty()) out.push_back(plain);
        const auto spaced = tokenizer.encode(" " + trimmed, false);
        if (!spaced.empty() && !plain.empty() && spaced[0] != plain[0] && spaced.size() == plain.size()) {
            out.push_back(spaced);
        }
    }
    return out;
}

void truncate_prompt(const openai::GenerationParams& p, std::vector<int32_t>& prompt_ids) {
    if (!p.truncate_prompt_tokens) return;
    const auto keep = static_cast<size_t>(*p.truncate_prompt_tokens);
    if (prompt_ids.size() > keep) prompt_ids.erase(prompt_ids.begin(), prompt_ids.end() - static_cast<ptrdiff_t>(keep));
}

ipc::AddRequest build_engine_request(const openai::GenerationParams& p, const std::vector<int32_t>& prompt,
                                     const EngineRequestRules& rules) {
    openai::GenerationParams sized = p;
    if (rules.echo_only) sized.max_tokens = 1;  // vLLM: one token runs, none is returned
    if (!sized.max_tokens && rules.default_max_tokens) {
        const int64_t room = rules.limits->max_model_len - static_cast<int64_t>(prompt.size());
        sized.max_tokens =
            static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(*rules.default_max_tokens, room)));
    }
    ipc::AddRequest a;
    a.prompt_token_ids = prompt;
    a.priority = p.priority;
    auto& s = a.sampling;
    s.temperature = p.temperature;
    s.top_p = p.top_p;
    s.top_k = p.top_k < 0 ? 0 : p.top_k;
    s.min_p = p.min_p;
    s.presence_penalty = p.presence_penalty;
    s.frequency_penalty = p.frequency_penalty;
    s.repetition_penalty = p.repetition_penalty;
    s.max_tokens = openai::resolve_max_tokens(static_cast<int64_t>(prompt.size()), sized, *rules.limits, rules.chat);
    s.min_tokens = p.min_tokens;
    s.stop_token_ids = p.stop_token_ids;
    s.logprobs = p.logprobs;
    // Echo with logprobs needs the prompt's entries; prompt_logprobs asks for them itself.
    s.prompt_logprobs = p.prompt_logprobs;
    if (rules.echo_logprobs) s.prompt_logprobs = std::max(p.prompt_logprobs.value_or(0), *p.logprobs);
    s.grammar = p.grammar;
    s.grammar_after_token_ids = rules.grammar_after;
    s.logit_bias = p.logit_bias;
    s.allowed_token_ids = p.allowed_token_ids;
    s.bad_words_token_ids = rules.bad_words;
    s.cache_salt = p.cache_salt;
    return a;
}

ipc::AddRequest choice_request(const ipc::AddRequest& prompt_request, const openai::GenerationParams& p, int32_t k,
                               std::string id) {
    ipc::AddRequest choice = prompt_request;
    choice.request_id = std::move(id);
    if (p.seed) choice.sampling.seed = *p.seed + static_cast<uint64_t>(k);
    return choice;
}

}  // namespace moeserve::serve
