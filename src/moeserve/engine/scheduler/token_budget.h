// TokenBudget: how many tokens and sequences one step may still take (TRT-LLM's micro-batch
// limit, separate from KV admission). Plain value type.
#pragma once

#include <algorithm>
#include <cstdint>

namespace moeserve::engine {

class TokenBudget {
public:
    TokenBudget(int32_t max_tokens, int32_t max_seqs) : tokens_left_(max_tokens), seqs_left_(max_seqs) {}

    int32_t tokens_left() const { return tokens_left_; }
    int32_t seqs_left() const { return seqs_left_; }
    bool has_room() const { return tokens_left_ > 0 && seqs_left_ > 0; }

    // Tokens a sequence wanting `wanted` may run this step: all of them if they fit, else the
    // rest of the budget when chunking is allowed, else 0.
    int32_t grant(int32_t wanted, bool allow_chunk) const {
        if (!has_room()) return 0;
        if (wanted <= tokens_left_) return wanted;
        return allow_chunk ? tokens_left_ : 0;
    }
    void consume(int32_t num_tokens) {
        tokens_left_ -= num_tokens;
        seqs_left_ -= 1;
    }

private:
    int32_t tokens_left_, seqs_left_;
};

}  // namespace moeserve::engine
