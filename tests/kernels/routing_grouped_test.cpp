// grouped_topk: hand-worked cases (group masking to 0.0, bias for selection only, V2 max-group,
// ties) and a sorting reference over random logits for every scoring / group rule.
#include "moeserve/kernels/cpu/routing_grouped.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace moeserve::kernels::cpu {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
float logit(double p) { return static_cast<float>(std::log(p / (1.0 - p))); }

TEST(GroupedTopkTest, V3GroupsBiasAndWeights) {
    // 8 experts in 4 groups of 2; sigmoid scores chosen directly.
    const std::vector<double> s = {0.9, 0.1, 0.5, 0.5, 0.2, 0.95, 0.3, 0.3};
    std::vector<float> logits;
    for (double p : s) logits.push_back(logit(p));
    // bias lifts group 3 (experts 6, 7) above group 0 for selection only.
    const std::vector<float> bias = {0, 0, 0, 0, 0, 0, 0.5f, 0.5f};
    GroupedTopkArgs a{8, 3, RouterScoring::kSigmoid, GroupScore::kTop2Sum, 4, 2, bias.data(), true, 2.5f};
    // group scores (top-2 sums of s + bias): g0 1.0, g1 1.0, g2 1.15, g3 1.6 -> keep g3, g2
    int32_t ids[3];
    float w[3];
    GroupedTopkScratch scratch;
    grouped_topk(logits.data(), 1, a, ids, w, scratch);
    EXPECT_EQ(ids[0], 5);  // 0.95
    EXPECT_EQ(ids[1], 6);  // 0.8 (biased), lower id of the tie with 7
    EXPECT_EQ(ids[2], 7);
    const double sum = sigmoid(logits[5]) + sigmoid(logits[6]) + sigmoid(logits[7]);
    EXPECT_NEAR(w[0], sigmoid(logits[5]) / sum * 2.5, 1e-6);  // unbiased scores
    EXPECT_NEAR(w[1], sigmoid(logits[6]) / sum * 2.5, 1e-6);
}

TEST(GroupedTopkTest, MaskedExpertsScoreZeroNotMinusInfinity) {
    // Kept group 1 has negative choice scores (negative bias); a dropped expert (0.0) wins.
    const std::vector<float> logits = {logit(0.1), logit(0.1), logit(0.9), logit(0.9)};
    const std::vector<float> bias = {-0.5f, -0.5f, 0.5f, -1.0f};
    GroupedTopkArgs a{4, 2, RouterScoring::kSigmoid, GroupScore::kTop2Sum, 2, 1, bias.data(), false, 1.0f};
    // choice: g0 {-0.4, -0.4} sum -0.8; g1 {1.4, -0.1} sum 1.3 -> keep g1; masked g0 -> 0.0
    int32_t ids[2];
    float w[2];
    GroupedTopkScratch scratch;
    grouped_topk(logits.data(), 1, a, ids, w, scratch);
    EXPECT_EQ(ids[0], 2);
    EXPECT_EQ(ids[1], 0);  // 0.0 beats expert 3's -0.1; lowest id among the zeros
    EXPECT_NEAR(w[1], 0.1, 1e-6);
}

TEST(GroupedTopkTest, V2SoftmaxMaxGroup) {
    const std::vector<float> logits = {1.0f, 3.0f, 2.5f, 2.5f, 0.0f, 0.0f};
    GroupedTopkArgs a{6, 2, RouterScoring::kSoftmax, GroupScore::kMax, 3, 1, nullptr, false, 1.5f};
    // group maxima: 3.0, 2.5, 0.0 -> keep group 0 only
    int32_t ids[2];
    float w[2];
    GroupedTopkScratch scratch;
    grouped_topk(logits.data(), 1, a, ids, w, scratch);
    double z = 0;
    for (float l : logits) z += std::exp(double(l));
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(ids[1], 0);
    EXPECT_NEAR(w[0], std::exp(3.0) / z * 1.5, 1e-6);
    EXPECT_NEAR(w[1], std::exp(1.0) / z * 1.5, 1e-6);
}

// A second formulation: groups ranked by sorting, masks applied, experts ranked by a stable sort.
void sorting_reference(const float* l, const GroupedTopkArgs& a, int32_t* ids, float* w) {
    const auto e = static_cast<size_t>(a.num_experts);
    std::vector<double> s(e), c(e);
    double mx = *std::max_element(l, l + e), z = 0;
    for (size_t i = 0; i < e; ++i) z += std::exp(double(l[i]) - mx);
    for (size_t i = 0; i < e; ++i) {
        s[i] = a.scoring == RouterScoring::kSigmoid ? sigmoid(l[i]) : std::exp(double(l[i]) - mx) / z;
        c[i] = s[i] + (a.bias ? a.bias[i] : 0.0);
    }
    if (a.group_score != GroupScore::kNone) {
        const size_t per = e / size_t(a.n_group);
        std::vector<double> g(size_t(a.n_group));
        for (size_t gi = 0; gi < g.size(); ++gi) {
            std::vector<double> v(c.begin() + long(gi * per), c.begin() + long((gi + 1) * per));
            std::sort(v.rbegin(), v.rend());
            g[gi] = a.group_score == GroupScore::kMax ? v[0] : v[0] + v[1];
        }
        std::vector<size_t> order(g.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return g[x] > g[y]; });
        std::vector<bool> keep(g.size());
        for (int64_t j = 0; j < a.topk_group; ++j) keep[order[size_t(j)]] = true;
        for (size_t i = 0; i < e; ++i) {
            if (!keep[i / per]) c[i] = 0.0;
        }
    }
    std::vector<int32_t> order(e);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return c[size_t(x)] > c[size_t(y)]; });
    double sum = 0;
    for (int j = 0; j < a.k; ++j) sum += s[size_t(order[size_t(j)])];
    for (int j = 0; j < a.k; ++j) {
        ids[j] = order[size_t(j)];
        const double v = s[size_t(ids[j])];
        w[j] = float((a.renormalize ? v / (sum + 1e-20) : v) * a.scale);
    }
}

TEST(GroupedTopkTest, MatchesSortingReference) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> d(-3.0f, 3.0f), db(-0.1f, 0.1f);
    GroupedTopkScratch scratch;  // reused across shapes: resizing must not leave stale state
    for (const auto& [e, k, groups, keep] : {std::tuple{256, 8, 8, 4}, std::tuple{64, 8, 8, 4}, std::tuple{16, 4, 4, 2},
                                             std::tuple{160, 6, 1, 1}, std::tuple{12, 12, 3, 3}}) {
        for (const auto& [scoring, gs] : {std::pair{RouterScoring::kSigmoid, GroupScore::kTop2Sum},
                                          std::pair{RouterScoring::kSoftmax, GroupScore::kMax},
                                          std::pair{RouterScoring::kSoftmax, GroupScore::kNone}}) {
            if (gs == GroupScore::kTop2Sum && e / groups < 2) continue;
            const int64_t tokens = 9;
            std::vector<float> logits(static_cast<size_t>(tokens * e)), bias(static_cast<size_t>(e));
            for (auto& x : logits) x = std::round(d(rng) * 4) / 4;  // coarse values: ties happen
            for (auto& x : bias) x = db(rng);
            GroupedTopkArgs a{e,
                              k,
                              scoring,
                              gs,
                              groups,
                              keep,
                              scoring == RouterScoring::kSigmoid ? bias.data() : nullptr,
                              scoring == RouterScoring::kSigmoid,
                              2.5f};
            std::vector<int32_t> ids(size_t(tokens * k)), rids(ids.size());
            std::vector<float> w(ids.size()), rw(ids.size());
            grouped_topk(logits.data(), tokens, a, ids.data(), w.data(), scratch);
            for (int64_t t = 0; t < tokens; ++t)
                sorting_reference(&logits[size_t(t * e)], a, &rids[size_t(t * k)], &rw[size_t(t * k)]);
            EXPECT_EQ(ids, rids) << "e " << e << " k " << k;
            for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], rw[i], 1e-6) << i;
        }
    }
}

}  // namespace
}  // namespace moeserve::kernels::cpu
