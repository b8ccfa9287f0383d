#include "moeserve/engine/spec_decode/ngram_proposer.h"

#include <algorithm>

namespace moeserve::engine {

std::vector<TokenId> propose_ngram(std::span<const TokenId> prompt, std::span<const TokenId> output, int32_t max_n,
                                   int32_t min_n, int32_t max_drafts) {
    const auto num_prompt = static_cast<int64_t>(prompt.size());
    const int64_t len = num_prompt + static_cast<int64_t>(output.size());
    const auto at = [&](int64_t i) {
        return i < num_prompt ? prompt[static_cast<size_t>(i)] : output[static_cast<size_t>(i - num_prompt)];
    };
    std::vector<TokenId> drafts;
    if (max_drafts < 1) return drafts;
    for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= std::max<int64_t>(min_n, 1); --n) {
        // The latest start whose n tokens equal the suffix and are followed by at least one token.
        for (int64_t start = len - n - 1; start >= 0; --start) {
            int64_t m = 0;
            while (m < n && at(start + m) == at(len - n + m)) ++m;
            if (m < n) continue;
            const int64_t end = std::min(len, start + n + max_drafts);
            for (int64_t i = start + n; i < end; ++i) drafts.push_back(at(i));
            return drafts;
        }
    }
    return drafts;
}

std::vector<TokenId> propose_drafts(const Request& r, const SpeculativeConfig& config, int32_t max_drafts) {
    if (!config.enabled()) return {};
    const int32_t n = std::min(max_drafts, config.num_speculative_tokens);
    if (config.method == SpeculativeConfig::Method::kDraftHead) {
        if (r.head_drafts_at != r.num_tokens() || n <= 0) return {};
        return {r.head_drafts.begin(), r.head_drafts.begin() + std::min<ptrdiff_t>(n, std::ssize(r.head_drafts))};
    }
    return propose_ngram(r.prompt_token_ids, r.output_token_ids, config.prompt_lookup_max, config.prompt_lookup_min, n);
}

}  // namespace moeserve::engine
