#include "moeserve/serve/request_log.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace moeserve::serve {
namespace {

// The first `n` code points of UTF-8 `s` (vLLM cuts a Python str, i.e. by code point); a cut
// never splits a character.
std::string first_code_points(const std::string& s, int n) {
    size_t i = 0;
    for (int seen = 0; i < s.size() && seen < n; ++seen) {
        ++i;
        while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;  // continuation bytes
    }
    return s.substr(0, i);
}

std::string quoted(const std::string& s) {
    // replace: a prompt is client text and need not be valid UTF-8
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string request_log_line(const std::string& id, const std::optional<std::string>& prompt,
                             std::span<const openai::TokenId> prompt_token_ids, const openai::GenerationParams& p,
                             int32_t max_tokens, int max_log_len) {
    std::string text = "null";
    if (prompt) text = quoted(max_log_len < 0 ? *prompt : first_code_points(*prompt, max_log_len));
    if (max_log_len >= 0 && prompt_token_ids.size() > static_cast<size_t>(max_log_len)) {
        prompt_token_ids = prompt_token_ids.first(static_cast<size_t>(max_log_len));
    }
    std::vector<std::string> stop;
    for (const auto& s : p.stop) stop.push_back(quoted(s));
    return fmt::format(
        "received request {}: prompt: {}, params: SamplingParams(n={}, presence_penalty={}, frequency_penalty={}, "
        "repetition_penalty={}, temperature={}, top_p={}, top_k={}, min_p={}, seed={}, stop=[{}], stop_token_ids=[{}], "
        "ignore_eos={}, max_tokens={}, min_tokens={}, logprobs={}, prompt_logprobs={}, skip_special_tokens={}, "
        "structured_output={}), prompt_token_ids: [{}]",
        id, text, p.n, p.presence_penalty, p.frequency_penalty, p.repetition_penalty, p.temperature, p.top_p,
        p.top_k > 0 ? p.top_k : -1, p.min_p, p.seed ? std::to_string(*p.seed) : "None", fmt::join(stop, ", "),
        fmt::join(p.stop_token_ids, ", "), p.ignore_eos ? "True" : "False", max_tokens, p.min_tokens,
        p.logprobs ? std::to_string(*p.logprobs) : "None",
        p.prompt_logprobs ? std::to_string(*p.prompt_logprobs) : "None", p.skip_special_tokens ? "True" : "False",
        p.grammar.empty() ? "None" : "grammar", fmt::join(prompt_token_ids, ", "));
}

}  // namespace moeserve::serve
