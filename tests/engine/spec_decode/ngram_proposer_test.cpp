// propose_ngram: the most recent earlier occurrence of the longest matching suffix n-gram (n from
// max down to min) across prompt and output, and what followed it; every request drafts.
#include "moeserve/engine/spec_decode/ngram_proposer.h"

#include <gtest/gtest.h>

namespace moeserve::engine {
namespace {

using Tokens = std::vector<TokenId>;

Tokens propose(const Tokens& prompt, const Tokens& output, int32_t max_n, int32_t min_n, int32_t k) {
    return propose_ngram(prompt, output, max_n, min_n, k);
}

TEST(NgramProposerTest, ProposesWhatFollowedTheLastOccurrence) {
    // Suffix [1 2] occurs at 0 (followed by 3 4) and at 5 (followed by 7 8): the latest wins.
    EXPECT_EQ(propose({1, 2, 3, 4, 9, 1, 2, 7, 8, 1, 2}, {}, 2, 2, 3), (Tokens{7, 8, 1}));
    // Capped at what exists after the occurrence.
    EXPECT_EQ(propose({5, 1, 2, 7, 1, 2}, {}, 2, 2, 8), (Tokens{7, 1, 2}));
    EXPECT_EQ(propose({5, 1, 2, 7, 1, 2}, {}, 2, 2, 1), (Tokens{7}));
}

TEST(NgramProposerTest, PrefersTheLongestMatchingN) {
    // n = 3 ([4 1 2]) matches at 0 -> 9; n = 2 ([1 2]) would match the later one at 5 -> 6.
    EXPECT_EQ(propose({4, 1, 2, 9, 0, 1, 2, 6, 4, 1, 2}, {}, 3, 1, 1), (Tokens{9}));
    EXPECT_EQ(propose({4, 1, 2, 9, 0, 1, 2, 6, 4, 1, 2}, {}, 2, 1, 1), (Tokens{6}));
    // Below min_n nothing is looked up.
    EXPECT_EQ(propose({3, 8, 5, 2}, {}, 3, 2, 2), Tokens{});
    EXPECT_EQ(propose({3, 2, 5, 2}, {}, 3, 1, 2), (Tokens{5, 2}));
}

TEST(NgramProposerTest, SearchesPromptAndOutputAsOneSequence) {
    EXPECT_EQ(propose({1, 2, 3}, {4, 1, 2}, 2, 2, 3), (Tokens{3, 4, 1}));
    EXPECT_EQ(propose({7, 1}, {2, 3, 1, 2}, 2, 2, 2), (Tokens{3, 1}));
    EXPECT_EQ(propose({1}, {}, 2, 1, 2), Tokens{});  // nothing earlier
    EXPECT_EQ(propose({}, {}, 2, 1, 2), Tokens{});
    EXPECT_EQ(propose({1, 1, 1}, {}, 2, 1, 0), Tokens{});
}

// Requests whose logits processing depends on their outputs draft too: the sampler processes each
// verified row with the drafts before it as outputs (Sampler::sample_drafts).
TEST(NgramProposerTest, EveryRequestDrafts) {
    ipc::SamplingParams p;
    p.max_tokens = 10;
    const SpeculativeConfig config{SpeculativeConfig::Method::kNgram, 3, 2, 1};
    Request r("r", {1, 2, 3, 1, 2}, p, 0, 0);
    EXPECT_EQ(propose_drafts(r, config, 8), (Tokens{3, 1, 2}));
    EXPECT_EQ(propose_drafts(r, config, 1), (Tokens{3}));
    EXPECT_EQ(propose_drafts(r, SpeculativeConfig{}, 8), Tokens{});
    for (int i = 0; i < 5; ++i) {
        Request q("q", {1, 2, 3, 1, 2}, p, 0, 0);
        if (i == 0) q.sampling.presence_penalty = 0.1f;
        if (i == 1) q.sampling.frequency_penalty = 0.1f;
        if (i == 2) q.sampling.repetition_penalty = 1.1f;
        if (i == 3) q.sampling.bad_words_token_ids = {{7}};
        if (i == 4) q.sampling.min_tokens = 1;
        EXPECT_EQ(propose_drafts(q, config, 8), (Tokens{3, 1, 2})) << i;
    }
}

}  // namespace
}  // namespace moeserve::engine
