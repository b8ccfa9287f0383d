// DraftBudget, speculative decoding's cost rule, on simulated steps: a step of n tokens takes
// a + b * n seconds and draft position j is accepted with probability alpha_j (a fixed-seed
// stream). The budget is the k with the most tokens per second once it has measured enough,
// whatever the cost: all drafts where they are cheap, none where a drafted token costs more than
// it brings, some in between; probes keep it measuring.
#include "moeserve/engine/spec_decode/draft_budget.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace moeserve::engine {
namespace {

struct Simulation {
    double per_step, per_token;  // a, b
    std::vector<double> alpha;   // acceptance of positions 1..k given the earlier ones
    int64_t sequences = 1;
};

// Runs `steps` decode steps; returns the budgets next() gave.
std::vector<int32_t> simulate(DraftBudget& budget, const Simulation& s, int steps) {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<int32_t> budgets;
    for (int i = 0; i < steps; ++i) {
        const int32_t k = budget.next(s.sequences);
        budgets.push_back(k);
        const int64_t n = s.sequences * (1 + k);
        budget.record_step(n, s.per_step + s.per_token * static_cast<double>(n));
        for (int64_t q = 0; q < s.sequences && k > 0; ++q) {
            int32_t accepted = 0;
            while (accepted < k && u(rng) < s.alpha[static_cast<size_t>(accepted)]) ++accepted;
            budget.record_drafts(k, accepted);
        }
    }
    return budgets;
}

// Whether step i (from 0) is a probe: the kWarmupSteps-th, then every kProbeInterval-th.
bool is_probe(size_t i) {
    return (i + 1 + DraftBudget::kProbeInterval - DraftBudget::kWarmupSteps) % DraftBudget::kProbeInterval == 0;
}

// The budgets of the last `n` steps that were not probes.
std::vector<int32_t> settled(const std::vector<int32_t>& budgets, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = budgets.size() - n; i < budgets.size(); ++i) {
        if (!is_probe(i)) out.push_back(budgets[i]);
    }
    return out;
}

TEST(DraftBudgetTest, WithoutTheRuleTheBudgetIsTheMaximum) {
    DraftBudget budget(4, false);
    for (int32_t k : simulate(budget, {1e-3, 10e-3, {0.1, 0.1, 0.1, 0.1}}, 200)) EXPECT_EQ(k, 4);
}

TEST(DraftBudgetTest, DraftsFullyWhileItMeasures) {
    DraftBudget budget(4, true);
    const auto budgets = simulate(budget, {1e-3, 10e-3, {0.1, 0.1, 0.1, 0.1}}, DraftBudget::kWarmupSteps);
    for (size_t i = 0; i + 1 < budgets.size(); ++i) EXPECT_EQ(budgets[i], 4);
    EXPECT_EQ(budgets.back(), 0);  // the first probe: a second step size for the fit
    EXPECT_TRUE(budget.fit().valid);
}

// Per-step cost dominates (dense weights, attention; a small MoE): every draft pays.
TEST(DraftBudgetTest, CheapDraftsKeepTheMaximum) {
    DraftBudget budget(4, true);
    const auto budgets = simulate(budget, {10e-3, 0.1e-3, {0.7, 0.7, 0.7, 0.7}}, 400);
    for (int32_t k : settled(budgets, 200)) EXPECT_EQ(k, 4);
    const DraftBudget::Fit f = budget.fit();
    ASSERT_TRUE(f.valid);
    EXPECT_NEAR(f.per_step, 10e-3, 1e-6);
    EXPECT_NEAR(f.per_token, 0.1e-3, 1e-7);
}

// Each token reads experts of its own (a MoE at batch 1): a draft accepted half the time costs
// more than it brings, so drafting stops but for the probes, which alternate none and the maximum.
TEST(DraftBudgetTest, CostlyDraftsTurnDraftingOffButForProbes) {
    DraftBudget budget(2, true);
    const auto budgets = simulate(budget, {1e-3, 10e-3, {0.5, 0.5}}, 400);
    for (int32_t k : settled(budgets, 200)) EXPECT_EQ(k, 0);
    std::vector<int32_t> probes;
    for (size_t i = 200; i < budgets.size(); ++i) {
        if (is_probe(i)) probes.push_back(budgets[i]);
    }
    ASSERT_GE(probes.size(), 2u);
    EXPECT_NE(probes[0], probes[1]);
    EXPECT_EQ(std::max(probes[0], probes[1]), 2);
}

// a = 10, b = 2 (ms), alpha 0.9, 0.5, 0.1, 0.05: tokens per ms 1/12, 1.9/14, 2.35/16, 2.39/18,
// 2.40/20 for k = 0..4: two drafts.
TEST(DraftBudgetTest, PicksTheDepthWithTheMostTokensPerSecond) {
    DraftBudget budget(4, true);
    const auto budgets = simulate(budget, {10e-3, 2e-3, {0.9, 0.5, 0.1, 0.05}}, 2000);
    const auto last = settled(budgets, 300);
    const auto twos = std::count(last.begin(), last.end(), 2);
    EXPECT_GE(twos, static_cast<long>(last.size()) * 9 / 10);
    const auto alpha = budget.acceptance();
    EXPECT_NEAR(alpha[0], 0.9, 0.1);
    EXPECT_NEAR(alpha[1], 0.5, 0.15);
}

// Batches: the per-step cost is shared by every sequence, so what pays at batch 1 may not at 16.
TEST(DraftBudgetTest, LargerBatchesDraftLess) {
    DraftBudget one(2, true), many(2, true);
    const Simulation s{10e-3, 1e-3, {0.6, 0.6}, 1};
    Simulation batch = s;
    batch.sequences = 16;
    EXPECT_EQ(settled(simulate(one, s, 400), 100).back(), 2);
    EXPECT_EQ(settled(simulate(many, batch, 400), 100).back(), 0);
}

}  // namespace
}  // namespace moeserve::engine
