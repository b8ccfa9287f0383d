// DpCoordinator on the fake model, DP ranks as threads over LocalComm: outputs equal each prompt
// alone whatever rank runs it; every rank sees the same phase each round (the timelines line up);
// with PD hybrid no step mixes and a rank runs a dummy exactly when it has nothing of the phase;
// idle rounds run no forward; the starvation guard is global; shutdown is agreed.
#include "moeserve/engine/dp_coordinator.h"

#include <gtest/gtest.h>

#include "engine/dp_test_util.h"

namespace moeserve::engine {
namespace {

using namespace testing;

EngineConfig fake_config() {
    EngineConfig c;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 16;
    c.max_model_len = 128;
    c.block_size = 4;
    c.num_blocks = 200;
    return c;
}

DpWorldSpec fake_world(int dp, bool hybrid) {
    DpWorldSpec spec;
    spec.sizes = {dp, 1, 1};
    spec.timeout = std::chrono::milliseconds(20000);
    spec.engine = fake_config();
    spec.pd_hybrid = hybrid;
    spec.make_model = [](parallel::ParallelContext&, ThreadPool&) { return std::make_unique<FakeModel>(); };
    spec.on_done = [](int, model::Model& m, RankRun& run) {
        // Every forward the engine ran, real or dummy, in rounds.
        run.stats.num_steps = static_cast<int64_t>(static_cast<FakeModel&>(m).num_forward_tokens.size());
    };
    return spec;
}

// n requests of the given ranks (request i goes to ranks[i]), arriving at rounds[i].
struct Workload {
    std::vector<Arrivals> arrivals;
    std::map<std::string, std::vector<int32_t>> expected;
};
Workload workload(int dp, const std::vector<int>& ranks, const std::vector<int64_t>& rounds) {
    FakeModel model;
    Workload w;
    w.arrivals.resize(static_cast<size_t>(dp));
    for (size_t i = 0; i < ranks.size(); ++i) {
        auto prompt = make_prompt(3 + static_cast<int32_t>(i * 13) % 38, 2 + static_cast<int32_t>(i));
        const int32_t max_tokens = 4 + static_cast<int32_t>(i * 7) % 12;
        const std::string id = "r" + std::to_string(i);
        w.expected[id] = greedy_alone(model, prompt, max_tokens);
        w.arrivals[static_cast<size_t>(ranks[i])][rounds[i]].push_back(greedy_add(id, prompt, max_tokens));
    }
    return w;
}

void expect_consistent(const std::vector<RankRun>& runs, bool hybrid) {
    for (size_t r = 0; r < runs.size(); ++r)
        ASSERT_TRUE(runs[r].error.empty()) << "rank " << r << ": " << runs[r].error;
    const auto& t0 = runs[0].timeline;
    for (size_t r = 0; r < runs.size(); ++r) {
        const auto& t = runs[r].timeline;
        ASSERT_EQ(t.size(), t0.size()) << "rank " << r;
        int64_t forwards = 0;
        for (size_t i = 0; i < t.size(); ++i) {
            ASSERT_EQ(t[i].phase, t0[i].phase) << "rank " << r << " round " << i;  // aligned
            if (t[i].phase == StepPhase::kIdle) continue;
            ++forwards;
            if (hybrid) {
                ASSERT_NE(t[i].phase, StepPhase::kMixed);
                const bool has_work = t[i].phase == StepPhase::kPrefill ? t[i].voted_prefill : t[i].voted_decode;
                EXPECT_EQ(t[i].dummy, !has_work) << "rank " << r << " round " << i;
            } else {
                EXPECT_EQ(t[i].phase, StepPhase::kMixed);
                EXPECT_EQ(t[i].dummy, !(t[i].voted_prefill || t[i].voted_decode)) << "rank " << r << " round " << i;
            }
            EXPECT_EQ(t[i].dummy, t[i].num_tokens == 0);
        }
        // Exactly one forward (real or dummy) per non-idle round, none in idle rounds.
        EXPECT_EQ(runs[r].stats.num_steps, forwards) << "rank " << r;
        const DpCounters& c = runs[r].counters;
        EXPECT_EQ(c.prefill_steps + c.decode_steps + c.mixed_steps, forwards);
        EXPECT_EQ(c.rounds, static_cast<int64_t>(t.size()));
    }
}

std::map<std::string, std::vector<int32_t>> all_tokens(const std::vector<RankRun>& runs) {
    std::map<std::string, std::vector<int32_t>> out;
    for (const auto& run : runs) {
        for (const auto& [id, t] : run.collected.tokens) {
            EXPECT_FALSE(out.count(id)) << id << " came from two ranks";
            out[id] = t;
        }
    }
    return out;
}

struct Case {
    std::string name;
    int dp;
    std::vector<int> ranks;
    std::vector<int64_t> rounds;
};

class DpCoordinatorFake : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(DpCoordinatorFake, OutputsEqualAloneAndPhasesAlign) {
    const auto& [c, hybrid] = GetParam();
    const Workload w = workload(c.dp, c.ranks, c.rounds);
    const auto runs = run_dp_world(fake_world(c.dp, hybrid), w.arrivals);
    expect_consistent(runs, hybrid);
    EXPECT_EQ(all_tokens(runs), w.expected);
    // A rank that got less work ran dummies while the others had work.
    int64_t dummies = 0;
    for (const auto& run : runs) {
        const auto& k = run.counters;
        dummies += k.dummy_prefill_steps + k.dummy_decode_steps + k.dummy_mixed_steps;
        EXPECT_EQ(run.stats.num_dummy_steps, k.dummy_prefill_steps + k.dummy_decode_steps + k.dummy_mixed_steps);
    }
    EXPECT_GT(dummies, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Workloads, DpCoordinatorFake,
    ::testing::Combine(::testing::Values(Case{"one_rank_gets_all", 2, {0, 0, 0, 0}, {0, 0, 1, 2}},
                                         Case{"five_over_two", 2, {0, 1, 0, 1, 0}, {0, 0, 0, 0, 0}},
                                         Case{"arrivals_mid_run", 2, {0, 1, 1, 0, 1, 0}, {0, 3, 7, 9, 15, 22}},
                                         Case{"five_over_three", 3, {0, 1, 2, 0, 1}, {0, 1, 2, 5, 9}},
                                         Case{"three_ranks_one_busy", 3, {2, 2, 2}, {0, 4, 8}}),
                       ::testing::Bool()),
    [](const auto& param_info) {
        return std::get<0>(param_info.param).name + (std::get<1>(param_info.param) ? "_hybrid" : "_mixed");
    });

TEST(DpCoordinator, IdleRoundsRunNoForward) {
    // Work at round 0 and again at round 60 (rank 1): the rounds in between agree on IDLE.
    const Workload w = workload(2, {0, 1}, {0, 60});
    const auto runs = run_dp_world(fake_world(2, true), w.arrivals);
    expect_consistent(runs, true);
    EXPECT_EQ(all_tokens(runs), w.expected);
    EXPECT_GT(runs[0].counters.idle_rounds, 20);
    EXPECT_EQ(runs[0].counters.idle_rounds, runs[1].counters.idle_rounds);
}

TEST(DpCoordinator, StarvationGuardIsGlobal) {
    // Rank 0 decodes r0 while rank 1 gets a new 20-token prompt every round: with the guard, the
    // decode gap of r0 is bounded (bound prefill rounds, then a decode round everywhere).
    for (int32_t bound : {2, 0}) {
        DpWorldSpec spec = fake_world(2, true);
        spec.max_consecutive_prefill_steps = bound;
        spec.engine.max_num_seqs = 64;
        spec.engine.num_blocks = 2000;
        std::vector<Arrivals> arrivals(2);
        arrivals[0][0].push_back(greedy_add("r0", make_prompt(4), 40));
        for (int i = 0; i < 30; ++i)
            arrivals[1][1 + i].push_back(greedy_add("a" + std::to_string(i), make_prompt(20, 3 + i), 2));
        const auto runs = run_dp_world(spec, arrivals);
        expect_consistent(runs, true);
        // Rounds in which rank 0 computed r0's tokens (its prefill, then its decodes).
        int64_t last = -1, gap = 0;
        for (const auto& e : runs[0].timeline) {
            if (e.phase != StepPhase::kIdle && !e.dummy) {
                if (last >= 0) gap = std::max(gap, e.round - last);
                last = e.round;
            }
        }
        if (bound == 2) {
            EXPECT_EQ(gap, 3);
            EXPECT_GT(runs[0].counters.guard_decode_steps, 5);
            EXPECT_GT(runs[0].counters.decode_requests_stalled, 0);
            EXPECT_EQ(runs[1].counters.decode_requests_stalled > 0, true);
        } else {
            EXPECT_GT(gap, 30);
            EXPECT_EQ(runs[0].counters.guard_decode_steps, 0);
        }
    }
}

TEST(DpCoordinator, ShutdownIsAgreed) {
    const Workload w = workload(2, {0, 0}, {0, 0});
    DpWorldSpec spec = fake_world(2, false);
    spec.shutdown_rank = 1;
    spec.shutdown_round = 3;
    const auto runs = run_dp_world(spec, w.arrivals);
    for (const auto& run : runs) {
        ASSERT_TRUE(run.error.empty()) << run.error;
        EXPECT_TRUE(run.shutdown);
        EXPECT_EQ(run.rounds, 4);
    }
}

TEST(DpCoordinator, SingleRankEqualsPlainEngine) {
    // dp = 1 without PD hybrid: the same steps and outputs as stepping the engine directly.
    const Workload w = workload(1, {0, 0, 0, 0, 0}, {0, 0, 2, 3, 9});
    const auto runs = run_dp_world(fake_world(1, false), w.arrivals);
    expect_consistent(runs, false);
    EXPECT_EQ(all_tokens(runs), w.expected);
    FakeModel model;
    ThreadPool pool(1);
    EngineCore core(model, pool, fake_config());
    std::map<int, std::vector<ipc::AddRequest>> arrivals;
    for (const auto& [round, adds] : w.arrivals[0]) arrivals[static_cast<int>(round)] = adds;
    const Collected plain = run_to_completion(core, arrivals);
    EXPECT_EQ(plain.tokens, w.expected);
    EXPECT_EQ(runs[0].stats.num_steps, static_cast<int64_t>(model.num_forward_tokens.size()));
    EXPECT_EQ(runs[0].counters.dummy_mixed_steps, 0);
}

}  // namespace
}  // namespace moeserve::engine
