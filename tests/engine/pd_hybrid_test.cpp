// PD-hybrid policy on one engine (fake model): the phase table and starvation guard of
// HybridPhaseSelector, steps that are prefill-only or decode-only (never mixed) with outputs equal
// to each prompt alone, and a bounded decode gap under a stream of arrivals (unbounded without).
#include "moeserve/engine/scheduler/policy_pd_hybrid.h"

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "moeserve/engine/scheduler/policy_mixed.h"

namespace moeserve::engine {
namespace {

using namespace testing;

TEST(HybridPhaseSelector, PhaseTable) {
    HybridPhaseSelector s(0);  // unbounded
    EXPECT_EQ(s.next(false, false), Phase::kIdle);
    EXPECT_EQ(s.next(false, true), Phase::kDecode);
    EXPECT_EQ(s.next(true, false), Phase::kPrefill);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(s.next(true, true), Phase::kPrefill);
    EXPECT_FALSE(s.guard_fired());
}

TEST(HybridPhaseSelector, GuardBoundsPrefillRunsWhileDecodesWait) {
    HybridPhaseSelector s(2);
    std::vector<Phase> got;
    for (int i = 0; i < 7; ++i) got.push_back(s.next(true, true));
    const Phase P = Phase::kPrefill, D = Phase::kDecode;
    EXPECT_EQ(got, (std::vector<Phase>{P, P, D, P, P, D, P}));
    // A prefill without waiting decodes does not count; a decode step resets the run.
    HybridPhaseSelector t(2);
    EXPECT_EQ(t.next(true, true), P);
    EXPECT_EQ(t.next(true, false), P);
    EXPECT_EQ(t.next(true, true), P);
    EXPECT_EQ(t.next(true, true), P);
    EXPECT_EQ(t.next(true, true), D);
    EXPECT_TRUE(t.guard_fired());
    EXPECT_EQ(t.next(false, true), D);
    EXPECT_FALSE(t.guard_fired());
    EXPECT_EQ(t.next(true, true), P);
    EXPECT_THROW(HybridPhaseSelector(-1), Error);
}

TEST(PhaseDecision, EachPolicyDecidesFromTheDemand) {
    const PhaseDemand none{.can_prefill = false, .has_decode = false}, both{.can_prefill = true, .has_decode = true};
    MixedPolicy mixed;
    EXPECT_EQ(mixed.decide_phase(none).phase, Phase::kIdle);
    EXPECT_EQ(mixed.decide_phase(both).phase, Phase::kMixed);
    EXPECT_EQ(mixed.decide_phase({.can_prefill = false, .has_decode = true}).phase, Phase::kMixed);
    PdHybridPolicy hybrid(1);
    EXPECT_EQ(hybrid.decide_phase(both).phase, Phase::kPrefill);
    const PhaseDecision guarded = hybrid.decide_phase(both);
    EXPECT_EQ(guarded.phase, Phase::kDecode);
    EXPECT_TRUE(guarded.guard_fired);
    EXPECT_EQ(hybrid.decide_phase(both).phase, Phase::kPrefill);
    // The guard would take the next step; a re-formed DP group starts over instead.
    hybrid.restart_phase_decisions();
    EXPECT_EQ(hybrid.decide_phase(both).phase, Phase::kPrefill);
}

EngineConfig config(int32_t max_batched = 16) {
    EngineConfig c;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = max_batched;
    c.max_model_len = 128;
    c.block_size = 4;
    c.num_blocks = 200;
    return c;
}

TEST(PdHybridPolicy, StepsNeverMixAndOutputsEqualAlone) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore engine(model, pool, config(), std::make_unique<PdHybridPolicy>(3));
    std::map<int, std::vector<ipc::AddRequest>> arrivals;
    std::map<std::string, std::vector<int32_t>> expected;
    for (int i = 0; i < 10; ++i) {
        auto prompt = make_prompt(3 + (i * 13) % 38, 2 + i);
        const int32_t max_tokens = 4 + (i * 7) % 12;
        const std::string id = "r" + std::to_string(i);
        expected[id] = greedy_alone(model, prompt, max_tokens);
        arrivals[i % 6].push_back(greedy_add(id, prompt, max_tokens));
    }
    Collected got;
    int prefill = 0, decode = 0;
    for (int s = 0; engine.has_unfinished_requests() || !arrivals.empty(); ++s) {
        if (auto it = arrivals.find(s); it != arrivals.end()) {
            for (const auto& a : it->second) engine.add_request(a);
            arrivals.erase(it);
        }
        const StepOutcome o = engine.step();
        ASSERT_NE(o.phase, Phase::kMixed) << "step " << s;
        prefill += o.phase == Phase::kPrefill;
        decode += o.phase == Phase::kDecode;
        for (const auto& out : o.outputs) {
            auto& t = got.tokens[out.request_id];
            t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
        }
        ASSERT_LT(s, 10000);
    }
    EXPECT_EQ(got.tokens, expected);
    EXPECT_GT(prefill, 0);
    EXPECT_GT(decode, 0);
    EXPECT_EQ(engine.kv_cache_manager().pool().num_free_blocks(), engine.kv_cache_manager().pool().num_blocks() - 1);
}

// r0 decodes 60 tokens while a new 20-token prompt arrives every step (2 prefill chunks of 16
// and 4 each). Returns r0's longest gap, in steps, between two of its tokens.
int max_decode_gap(int32_t bound) {
    FakeModel model;
    ThreadPool pool(1);
    EngineConfig c = config(16);
    c.max_num_seqs = 64;
    c.num_blocks = 2000;
    c.max_model_len = 128;
    EngineCore engine(model, pool, c, std::make_unique<PdHybridPolicy>(bound));
    engine.add_request(greedy_add("r0", make_prompt(4), 60));
    int last = -1, gap = 0, arrived = 0;
    for (int s = 0; engine.has_unfinished_requests(); ++s) {
        if (s >= 1 && arrived < 40)
            engine.add_request(greedy_add("a" + std::to_string(arrived++), make_prompt(20, 3 + s), 2));
        for (const auto& out : engine.step().outputs) {
            if (out.request_id != "r0" || out.new_token_ids.empty()) continue;
            if (last >= 0) gap = std::max(gap, s - last);
            last = s;
        }
        MOESERVE_CHECK(s < 100000, "does not finish");
    }
    return gap;
}

TEST(PdHybridPolicy, StarvationGuardBoundsDecodeGap) {
    EXPECT_EQ(max_decode_gap(2), 3);  // two prefill steps, then r0's decode
    EXPECT_EQ(max_decode_gap(4), 5);
    EXPECT_GT(max_decode_gap(0), 40);  // unbounded: r0 waits for the whole stream of prefills
}

}  // namespace
}  // namespace moeserve::engine
