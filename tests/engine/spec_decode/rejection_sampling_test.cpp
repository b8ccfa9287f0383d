// Sampler::sample_drafts: greedy verification accepts the longest prefix of drafts that equals the
// argmax tokens, plus one; sampled verification of an n-gram draft (a point mass) is rejection
// sampling that keeps the target distribution. Chi-square tests on a 6-token vocabulary with a
// fixed seed: each threshold is the chi-square quantile with a false-failure rate of 1e-6 for a
// random seed (df 5: 35.89, df 4: 33.38); the acceptance rate is checked within 5 standard
// deviations (two-sided 5.7e-7). With the fixed seed the tests are deterministic.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "moeserve/engine/sampler.h"

namespace moeserve::engine {
namespace {

constexpr int64_t kVocab = 6;
using Row = std::array<float, kVocab>;

Request make_request(float temperature, int32_t top_k, uint64_t seed) {
    ipc::SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.max_tokens = 100;
    return Request("r", {2, 3}, p, seed, 0);
}

// Probabilities of softmax(row / temperature) restricted to the top_k largest (0 = all).
std::array<double, kVocab> target(const Row& row, float temperature, int32_t top_k) {
    std::array<double, kVocab> p{};
    double total = 0;
    for (int64_t i = 0; i < kVocab; ++i) {
        int32_t rank = 0;
        for (int64_t j = 0; j < kVocab; ++j) rank += row[j] > row[i] || (row[j] == row[i] && j < i);
        if (top_k > 0 && rank >= top_k) continue;
        p[i] = std::exp(static_cast<double>(row[i]) / temperature);
        total += p[i];
    }
    for (auto& x : p) x /= total;
    return p;
}

// Pearson's statistic of counts against probabilities (cells with probability 0 must be empty).
double chi_square(const std::array<int64_t, kVocab>& counts, const std::array<double, kVocab>& p) {
    int64_t n = 0;
    for (int64_t c : counts) n += c;
    double stat = 0;
    for (int64_t i = 0; i < kVocab; ++i) {
        if (p[i] == 0) {
            EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
            continue;
        }
        const double expected = p[i] * static_cast<double>(n);
        stat += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
    }
    return stat;
}

// Runs `trials` verifications of one draft (rows r0 then r1) and checks: the first token drawn
// follows p0; the draft is accepted with probability p0(draft); a rejection draws from p0 without
// the draft, renormalized; after an acceptance the next token follows p1.
void check_distribution(float temperature, int32_t top_k, TokenId draft, int trials) {
    const Row r0 = {1.0f, 0.2f, 1.4f, -0.5f, 0.9f, 0.0f};
    const Row r1 = {0.1f, 1.2f, -0.3f, 0.8f, 0.4f, 1.0f};
    const auto p0 = target(r0, temperature, top_k), p1 = target(r1, temperature, top_k);
    Sampler sampler(kVocab, nullptr);
    Request request = make_request(temperature, top_k, 20260101);
    std::array<int64_t, kVocab> first{}, after_reject{}, after_accept{};
    int64_t accepted = 0;
    const TokenId drafts[] = {draft};
    for (int t = 0; t < trials; ++t) {
        Row a = r0, b = r1;
        float* rows[] = {a.data(), b.data()};
        const DraftRows d{&request, rows, drafts};
        const auto drawn = sampler.sample_drafts(std::span<const DraftRows>(&d, 1)).at(0);
        ++first[drawn[0].token_id];
        if (drawn[0].token_id == draft) {
            ASSERT_EQ(drawn.size(), 2u);
            ++accepted;
            ++after_accept[drawn[1].token_id];
        } else {
            ASSERT_EQ(drawn.size(), 1u);
            ++after_reject[drawn[0].token_id];
        }
    }
    const int df = (top_k > 0 ? top_k : static_cast<int>(kVocab)) - 1;
    const double limit = df == 5 ? 35.89 : df == 4 ? 33.38 : df == 3 ? 30.66 : 27.63;  // 1e-6 quantiles
    EXPECT_LT(chi_square(first, p0), limit);
    EXPECT_LT(chi_square(after_accept, p1), limit);
    const double pa = p0[static_cast<size_t>(draft)], n = trials;
    EXPECT_LT(std::abs(static_cast<double>(accepted) - pa * n), 5 * std::sqrt(n * pa * (1 - pa)))
        << accepted << " accepted of " << trials << ", p(draft) = " << pa;
    std::array<double, kVocab> without = p0;
    without[static_cast<size_t>(draft)] = 0;
    for (auto& x : without) x /= 1 - pa;  // max(p - q, 0), normalized, for q a point mass at the draft
    const double reject_limit = df - 1 == 4 ? 33.38 : df - 1 == 3 ? 30.66 : 27.63;
    EXPECT_LT(chi_square(after_reject, without), reject_limit);
}

TEST(RejectionSamplingTest, PointMassDraftKeepsTheTargetDistribution) { check_distribution(1.0f, 0, 2, 60000); }

TEST(RejectionSamplingTest, KeepsTheTruncatedDistributionOfTopK) { check_distribution(0.7f, 4, 0, 60000); }

TEST(RejectionSamplingTest, GreedyAcceptsTheLongestMatchingPrefixPlusOne) {
    // argmax of each row: 2, 1, 5.
    const Row r0 = {1.0f, 0.2f, 1.4f, -0.5f, 0.9f, 0.0f};
    const Row r1 = {0.1f, 1.2f, -0.3f, 0.8f, 0.4f, 1.0f};
    const Row r2 = {0.1f, 0.2f, -0.3f, 0.8f, 0.4f, 1.0f};
    Sampler sampler(kVocab, nullptr);
    Request request = make_request(0.0f, 0, 1);
    const auto verify = [&](std::vector<TokenId> drafts) {
        Row a = r0, b = r1, c = r2;
        float* rows[] = {a.data(), b.data(), c.data()};
        const DraftRows d{&request, std::span<float* const>(rows, drafts.size() + 1), drafts};
        std::vector<TokenId> out;
        const auto drawn = sampler.sample_drafts(std::span<const DraftRows>(&d, 1));
        for (const auto& t : drawn.at(0)) out.push_back(t.token_id);
        return out;
    };
    EXPECT_EQ(verify({2, 1}), (std::vector<TokenId>{2, 1, 5}));  // all accepted + the bonus token
    EXPECT_EQ(verify({2, 3}), (std::vector<TokenId>{2, 1}));     // second rejected: its correction
    EXPECT_EQ(verify({4, 1}), (std::vector<TokenId>{2}));        // first rejected
    EXPECT_EQ(verify({}), (std::vector<TokenId>{2}));            // no drafts: a plain decode
}

}  // namespace
}  // namespace moeserve::engine
