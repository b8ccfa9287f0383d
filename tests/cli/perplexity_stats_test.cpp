// perplexity_stats: llama-perplexity chunking and its refusal, the perplexity and its standard
// error against hand-computed values, the KL divergence (0 against itself, the top-k + rest
// formula against a direct sum), and the base file's round trip and refusals.
#include "moeserve/cli/perplexity_stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>

#include "moeserve/core/error.h"
#include "test_support.h"

namespace moeserve::cli {
namespace {

using test::error_of;

TEST(PerplexityChunks, CutsWholeChunksAndPutsTheBosFirst) {
    std::vector<int32_t> tokens(10);
    std::iota(tokens.begin(), tokens.end(), 100);
    const auto plain = perplexity_chunks(tokens, 4, std::nullopt);
    ASSERT_EQ(plain.size(), 2u);  // the last 2 tokens make no chunk
    EXPECT_EQ(plain[1], (std::vector<int32_t>{104, 105, 106, 107}));
    const auto bos = perplexity_chunks(tokens, 4, 7);
    EXPECT_EQ(bos[0], (std::vector<int32_t>{7, 101, 102, 103}));
    EXPECT_EQ(bos[1], (std::vector<int32_t>{7, 105, 106, 107}));
    EXPECT_EQ(first_scored(512), 256);
    EXPECT_EQ(num_scored(512), 255);  // positions 256 .. 510 predict tokens 257 .. 511
    EXPECT_EQ(num_scored(5), 2);
}

TEST(PerplexityChunks, RefusesATextShorterThanOneChunkInOneLine) {
    const std::string e = error_of([] { perplexity_chunks(std::vector<int32_t>(100), 128, std::nullopt); });
    EXPECT_THAT(e, testing::HasSubstr("the text has 100 tokens, fewer than one chunk of --ctx 128"));
    EXPECT_EQ(e.find('\n'), std::string::npos);
    EXPECT_THAT(error_of([] { perplexity_chunks(std::vector<int32_t>(100), 2, std::nullopt); }),
                testing::HasSubstr("--ctx 2"));
}

TEST(NllStats, PerplexityAndItsStandardError) {
    NllStats s;
    for (double v : {1.0, 2.0, 3.0, 4.0}) s.add(v);
    EXPECT_DOUBLE_EQ(s.mean(), 2.5);
    // sample variance 5/3, stderr sqrt(5/3/4); ppl e^2.5 with the delta-method error ppl * stderr
    EXPECT_NEAR(s.stderr_mean(), std::sqrt(5.0 / 12.0), 1e-12);
    EXPECT_NEAR(s.ppl(), std::exp(2.5), 1e-9);
    EXPECT_NEAR(s.ppl_stderr(), std::exp(2.5) * std::sqrt(5.0 / 12.0), 1e-9);
}

// A full distribution over 5 tokens as this run reports it (every id in top, most likely first).
ipc::TokenLogprobs distribution(const std::vector<double>& p, int32_t token) {
    ipc::TokenLogprobs lp;
    lp.token_id = token;
    lp.logprob = static_cast<float>(std::log(p[static_cast<size_t>(token)]));
    std::vector<int32_t> ids(p.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    for (int32_t id : ids) lp.top.emplace_back(id, static_cast<float>(std::log(p[static_cast<size_t>(id)])));
    return lp;
}

BasePosition base_of(const ipc::TokenLogprobs& lp, size_t k) {
    return {lp.logprob, {lp.top.begin(), lp.top.begin() + static_cast<std::ptrdiff_t>(k)}};
}

TEST(KlStats, ZeroAgainstItselfAndTheTopKFormulaOtherwise) {
    const std::vector<double> p = {0.5, 0.2, 0.15, 0.1, 0.05}, q = {0.4, 0.3, 0.1, 0.1, 0.1};
    const auto lp = distribution(p, 1), lq = distribution(q, 1);
    KlStats self;
    self.add(base_of(lp, 3), lp);
    EXPECT_EQ(self.summary().kld_mean, 0.0);
    EXPECT_EQ(self.summary().same_top_mean, 1.0);
    EXPECT_EQ(self.summary().delta_p_mean, 0.0);

    std::vector<float> q_lp(q.size());
    for (size_t i = 0; i < q.size(); ++i) q_lp[i] = static_cast<float>(std::log(q[i]));
    double full = 0;
    for (size_t i = 0; i < p.size(); ++i) full += p[i] * std::log(p[i] / q[i]);
    EXPECT_NEAR(kl_divergence_top_k(base_of(lp, 5), q_lp), full, 1e-6);
    // top 3 of p (ids 0, 1, 2) and the rest (p 0.15, q 0.2) as one outcome
    const double top3 = 0.5 * std::log(0.5 / 0.4) + 0.2 * std::log(0.2 / 0.3) + 0.15 * std::log(0.15 / 0.1) +
                        0.15 * std::log(0.15 / 0.2);
    EXPECT_NEAR(kl_divergence_top_k(base_of(lp, 3), q_lp), top3, 1e-6);

    KlStats other;
    other.add(base_of(lp, 3), lq);
    const KlStats::Summary s = other.summary();
    EXPECT_EQ(s.same_top_mean, 1.0);  // both put token 0 first
    EXPECT_NEAR(s.delta_p_mean, 0.3 - 0.2, 1e-6);
    EXPECT_NEAR(s.ln_ppl_ratio, std::log(0.2 / 0.3), 1e-6);
}

TEST(BaseFile, RoundTripsAndRefusesOtherFiles) {
    const auto dir = test::scratch_dir("perplexity_base_file");
    const std::string path = (dir / "base.kld").string();
    BaseHeader h{.vocab = 5, .ctx = 4, .num_chunks = 2, .top_k = 2, .tokens = {0, 1, 2, 3, 4, 0, 1, 2}};
    const auto lp = distribution({0.5, 0.2, 0.15, 0.1, 0.05}, 2);
    {
        BaseWriter w(path, h);
        for (int i = 0; i < 2 * num_scored(4); ++i) w.add(lp);
        w.close();
    }
    const BaseFile f = read_base_file(path);
    EXPECT_EQ(f.header.tokens, h.tokens);
    ASSERT_EQ(f.positions.size(), 2u);
    EXPECT_EQ(f.positions[1].token_logprob, lp.logprob);
    EXPECT_EQ(f.positions[1].top, (std::vector<std::pair<int32_t, float>>{lp.top[0], lp.top[1]}));

    EXPECT_THAT(error_of([&] { read_base_file((dir / "missing").string()); }), testing::HasSubstr("no such file"));
    std::ofstream((dir / "text").string()) << "not a base file at all";
    EXPECT_THAT(error_of([&] { read_base_file((dir / "text").string()); }), testing::HasSubstr("not a file written"));
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
    EXPECT_THAT(error_of([&] { read_base_file(path); }), testing::HasSubstr("truncated"));
}

}  // namespace
}  // namespace moeserve::cli
