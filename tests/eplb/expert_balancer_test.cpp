// EPLB (#31): the placement algorithm (balance, copies of hot experts, slots kept where they
// can be) and the balancer's protocol over two LocalComm ranks (counting, a decision every
// step_interval forwards, moves switched on every rank at the same forward, dummy forwards not
// counted, a reset back to the initial placement, also in the middle of a move). The model-level
// test is tests/model/eplb_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "moeserve/core/error.h"
#include "moeserve/model/eplb/expert_balancer.h"
#include "moeserve/model/eplb/expert_placement.h"
#include "moeserve/parallel/groups.h"

namespace moeserve::model {
namespace {

using namespace std::chrono_literals;
using parallel::ParallelSizes;

std::vector<double> loads_of(const ExpertPlacement& p, const std::vector<int64_t>& load) { return p.rank_loads(load); }

TEST(ExpertPlacementTest, InitialIsThePlainShardsThenCopies) {
    const ExpertPlacement p = ExpertPlacement::initial(8, 2, 0);
    EXPECT_EQ(p.slots_per_rank(), 4);
    for (int e = 0; e < 8; ++e) {
        ASSERT_EQ(p.copies(e).size(), 1u);
        EXPECT_EQ(p.copies(e)[0], e);
    }
    const ExpertPlacement r = ExpertPlacement::initial(8, 2, 2);
    EXPECT_EQ(r.slots_per_rank(), 5);
    EXPECT_EQ(r.expert_of_slot(8), 0);
    EXPECT_EQ(r.expert_of_slot(9), 1);
    EXPECT_EQ(r.copies(0).size(), 2u);
    EXPECT_THROW(ExpertPlacement::initial(8, 3, 0), Error);
}

TEST(ExpertPlacementTest, HotExpertsOfOneRankAreSpreadOver) {
    const ExpertPlacement p = ExpertPlacement::initial(8, 2, 0);
    const std::vector<int64_t> load = {100, 90, 1, 1, 2, 2, 2, 2};
    EXPECT_NEAR(load_imbalance(loads_of(p, load)), 192.0 / 100.0, 1e-9);
    const ExpertPlacement q = p.rebalanced(load);
    EXPECT_NE(q.copies(0)[0] / 4, q.copies(1)[0] / 4) << "the two hot experts on different ranks";
    EXPECT_LT(load_imbalance(loads_of(q, load)), 1.05);
    // every expert exactly once, slots per rank unchanged
    for (int e = 0; e < 8; ++e) EXPECT_EQ(q.copies(e).size(), 1u);
    // the same loads again: nothing moves (slots keep what their rank still holds)
    EXPECT_TRUE(q.rebalanced(load) == q);
    EXPECT_EQ(q.changed_slots(q.rebalanced(load), 0) + q.changed_slots(q.rebalanced(load), 1), 0);
}

TEST(ExpertPlacementTest, RedundantSlotsCopyTheHottestExpertOnOtherRanks) {
    const ExpertPlacement p = ExpertPlacement::initial(4, 2, 2);  // 3 slots per rank
    const std::vector<int64_t> load = {1000, 10, 10, 10};
    const ExpertPlacement q = p.rebalanced(load);
    ASSERT_EQ(q.copies(0).size(), 2u);
    EXPECT_NE(q.copies(0)[0] / 3, q.copies(0)[1] / 3) << "one copy per rank";
    EXPECT_LT(load_imbalance(loads_of(q, load)), 1.05);
    // choices of expert 0 alternate between its copies; others go to their one slot
    std::vector<int32_t> ids = {0, 0, 0, 0, 1, 0}, turns;
    q.to_physical(ids.data(), static_cast<int64_t>(ids.size()), 0, turns);
    EXPECT_EQ(ids[0], q.copies(0)[0]);
    EXPECT_EQ(ids[1], q.copies(0)[1]);
    EXPECT_EQ(ids[2], q.copies(0)[0]);
    EXPECT_EQ(ids[4], q.copies(1)[0]);
}

TEST(ExpertPlacementTest, NoLoadIsBalanced) {
    const ExpertPlacement p = ExpertPlacement::initial(8, 4, 0);
    EXPECT_EQ(load_imbalance(loads_of(p, std::vector<int64_t>(8, 0))), 1.0);
}

// Two EP ranks (threads over LocalComm), each with a balancer whose loads are fake experts: the
// install calls are recorded.
struct FakeRank {
    std::vector<int64_t> installed;  // MoE layers installed with experts
    std::atomic<int> loads{0};
};

TEST(ExpertBalancerTest, SkewedCountsMoveEveryRankAtTheSameForward) {
    parallel::LocalWorld world = parallel::make_local_world(ParallelSizes{2, 1, 2}, 10s);
    constexpr int kLayers = 3, kForwards = 40;
    EplbConfig config{.enabled = true, .window_size = 4, .step_interval = 4};
    std::vector<FakeRank> ranks(2);
    std::vector<std::vector<int>> placement_changes(2);  // forward at which each rank's layer 0 changed
    std::vector<ExpertLoadStats> stats(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
            try {
                FakeRank& fake = ranks[static_cast<size_t>(r)];
                auto load = [&fake](int64_t, const ExpertPlacement&) {
                    ++fake.loads;
                    return Experts();
                };
                auto install = [&fake](int64_t layer, std::optional<Experts> e) {
                    if (e) fake.installed.push_back(layer);
                };
                ExpertBalancer b(config, r, kLayers, ExpertPlacement::initial(8, 2, 0), load, install, nullptr);
                parallel::Communicator& ep = *world.ranks[static_cast<size_t>(r)].ep;
                const ExpertPlacement initial = b.placement(0);
                for (int f = 1; f <= kForwards; ++f) {
                    // a dummy forward every 3rd: not counted
                    const bool counted = f % 3 != 0;
                    b.begin_forward(ep, counted);
                    if (!(b.placement(0) == initial) && placement_changes[static_cast<size_t>(r)].empty())
                        placement_changes[static_cast<size_t>(r)].push_back(f);
                    for (int m = 0; m < kLayers; ++m) {
                        int32_t* c = b.counts(m);
                        ASSERT_EQ(c == nullptr, !counted);
                        if (c != nullptr) {
                            c[0] += 10;  // experts 0 and 1 (both on rank 0) take the tokens
                            c[1] += 10;
                            c[5] += 1;
                        }
                    }
                    std::this_thread::sleep_for(1ms);  // a forward takes time: the mover runs meanwhile
                }
                stats[static_cast<size_t>(r)] = b.stats();
                b.reset();
                EXPECT_TRUE(b.placement(0) == initial);
            } catch (const std::exception& e) {
                errors[static_cast<size_t>(r)] = e.what();
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(errors[static_cast<size_t>(r)].empty()) << errors[static_cast<size_t>(r)];
    ASSERT_EQ(placement_changes[0].size(), 1u);
    EXPECT_EQ(placement_changes[0], placement_changes[1]) << "both ranks switch layer 0 at the same forward";
    EXPECT_GT(placement_changes[0][0], 4) << "decided at forward 4, switched later";
    for (int r = 0; r < 2; ++r) {
        const ExpertLoadStats& s = stats[static_cast<size_t>(r)];
        EXPECT_GE(s.decisions, 2);
        EXPECT_EQ(s.rebalances, 1);
        EXPECT_GT(s.moved_slots, 0);
        EXPECT_LT(s.imbalance, 1.1) << "after the move";
        // both ranks moved every layer, and reset() reloaded every layer once more
        EXPECT_EQ(ranks[static_cast<size_t>(r)].installed.size(), 2u * kLayers) << "rank " << r;
    }
}

// A group re-formed in the middle of a move (rank 1's mover still loading): reset() on every rank
// waits for the load in progress, goes back to the initial placement, and the ranks move again
// together afterwards.
TEST(ExpertBalancerTest, ResetMidMoveStartsOverOnTheInitialPlacement) {
    parallel::LocalWorld world = parallel::make_local_world(ParallelSizes{2, 1, 2}, 10s);
    constexpr int kLayers = 4;
    EplbConfig config{.enabled = true, .window_size = 4, .step_interval = 4};
    std::vector<std::string> errors(2);
    std::vector<ExpertPlacement> final_placement(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
            try {
                std::atomic<bool> slow{r == 1};
                auto load = [&slow](int64_t, const ExpertPlacement&) {
                    if (slow) std::this_thread::sleep_for(300ms);  // still loading when the group re-forms
                    return Experts();
                };
                ExpertBalancer b(
                    config, r, kLayers, ExpertPlacement::initial(8, 2, 0), load, [](int64_t, std::optional<Experts>) {},
                    nullptr);
                parallel::Communicator& ep = *world.ranks[static_cast<size_t>(r)].ep;
                const ExpertPlacement initial = b.placement(0);
                const auto forward = [&] {
                    b.begin_forward(ep, true);
                    for (int m = 0; m < kLayers; ++m) b.counts(m)[2] += 10, b.counts(m)[3] += 10;
                };
                for (int f = 1; f <= 6; ++f) forward();  // decided at 4; rank 1 has not loaded a layer yet
                EXPECT_TRUE(b.placement(kLayers - 1) == initial);
                b.reset();
                for (int m = 0; m < kLayers; ++m) EXPECT_TRUE(b.placement(m) == initial);
                slow = false;
                // rebalances changes at the same forward on both ranks: they stop together
                for (int f = 1; f <= 400 && b.stats().rebalances < 1; ++f) {
                    forward();
                    std::this_thread::sleep_for(1ms);
                }
                EXPECT_EQ(b.stats().rebalances, 1) << "the move after the reset completed";
                final_placement[static_cast<size_t>(r)] = b.placement(kLayers - 1);
            } catch (const std::exception& e) {
                errors[static_cast<size_t>(r)] = e.what();
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(errors[static_cast<size_t>(r)].empty()) << errors[static_cast<size_t>(r)];
    EXPECT_TRUE(final_placement[0] == final_placement[1]);
    EXPECT_FALSE(final_placement[0] == ExpertPlacement::initial(8, 2, 0));
}

}  // namespace
}  // namespace moeserve::model
