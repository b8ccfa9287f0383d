// Scheduler: per-step token progress under the budget, seats, preemption order, prefix hits,
// aborts, rejections and forced phases. The "model" here samples token 7 for every sequence.
#include "moeserve/engine/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <map>

#include "engine/engine_test_util.h"
#include "engine/scheduler/scheduler_harness.h"

namespace moeserve::engine {
namespace {

using testing::config;
using testing::Harness;
using testing::make_request;
using testing::Progress;
using Ids = std::vector<int32_t>;

TEST(SchedulerTest, ChunkedPrefillKeepsWithinTheTokenBudget) {
    // budget 8 tokens/step; r0: 10-token prompt, 3 outputs; r1: 5-token prompt, 2 outputs.
    //   step   r0            r1           tokens
    //   1      8 (chunk)     -            8   budget used up by r0's first chunk
    //   2      2 -> out 1    5 -> out 1   7
    //   3      1 -> out 2    1 -> out 2   2   r1 finishes (length)
    //   4      1 -> out 3    -            1   r0 finishes (length)
    Harness h(32, 4, config(8, 8));
    h.scheduler.add_request(make_request("r0", 10, 3));
    h.scheduler.add_request(make_request("r1", 5, 2, 20));
    EXPECT_EQ(h.step(), (Progress{{"r0", 8}}));
    EXPECT_EQ(h.batch.phase, Phase::kPrefill);
    EXPECT_TRUE(h.outputs.empty());
    EXPECT_EQ(h.step(), (Progress{{"r0", 2}, {"r1", 5}}));
    EXPECT_EQ(h.outputs.size(), 2u);
    EXPECT_EQ(h.step(), (Progress{{"r0", 1}, {"r1", 1}}));
    EXPECT_EQ(h.batch.phase, Phase::kDecode);
    EXPECT_EQ(h.finish_of("r1"), FinishReason::kLength);
    EXPECT_EQ(h.step(), (Progress{{"r0", 1}}));
    EXPECT_EQ(h.finish_of("r0"), FinishReason::kLength);
    EXPECT_FALSE(h.scheduler.has_unfinished_requests());
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 31);
}

TEST(SchedulerTest, DecodesAndNewPrefillShareAStep) {
    // r0 decoding when r1 arrives: step 2 is mixed (1 decode token + r1's 6 prompt tokens).
    Harness h(32, 4, config(8, 64));
    h.scheduler.add_request(make_request("r0", 3, 5));
    EXPECT_EQ(h.step(), (Progress{{"r0", 3}}));
    h.scheduler.add_request(make_request("r1", 6, 5));
    EXPECT_EQ(h.step(), (Progress{{"r0", 1}, {"r1", 6}}));
    EXPECT_EQ(h.batch.phase, Phase::kMixed);
    EXPECT_EQ(h.batch.num_prefill_tokens, 6);
}

TEST(SchedulerTest, WithoutChunkingALongPromptWaitsForAWholeBudget) {
    // budget 12, no chunking: r1's 10 tokens do not fit next to r0's 4 in step 1.
    SchedulerConfig c = config(8, 12, 12);
    c.enable_chunked_prefill = false;
    Harness h(32, 4, c);
    h.scheduler.add_request(make_request("r0", 4, 2));
    h.scheduler.add_request(make_request("r1", 10, 2, 20));
    EXPECT_EQ(h.step(), (Progress{{"r0", 4}}));
    EXPECT_EQ(h.step(), (Progress{{"r0", 1}, {"r1", 10}}));
}

TEST(SchedulerTest, MaxNumSeqsBoundsRunningRequests) {
    Harness h(32, 4, config(2, 64));
    h.scheduler.add_request(make_request("r0", 4, 1));
    h.scheduler.add_request(make_request("r1", 4, 3));
    h.scheduler.add_request(make_request("r2", 4, 3));
    EXPECT_EQ(h.step(), (Progress{{"r0", 4}, {"r1", 4}}));  // r0 finishes (1 token)
    EXPECT_EQ(h.finish_of("r0"), FinishReason::kLength);
    EXPECT_EQ(h.step(), (Progress{{"r1", 1}, {"r2", 4}}));
}

TEST(SchedulerTest, PreemptsTheYoungestAndRecomputesFromItsOwnCachedBlocks) {
    // 4 usable blocks of 4 tokens; r0, r1: 4-token prompts, 8 outputs each.
    //   step 1: r0 [1], r1 [2]     steps 2-5: r0 [1 3], r1 [2 4]   (9 tokens each after step 5)
    //   step 6: r0 needs a 3rd block; none free -> r1 preempted (frees 4, 2); r0 takes 4
    //   step 7: r0 decodes; r1 (hit: block 2 still cached) needs 1 revived + 2 new > 1 free: waits
    //   step 8: r0's 8th output -> finished, blocks freed
    //   step 9: r1 re-admitted: 4 tokens from block 2, recomputes 5 (prompt + its 5 outputs)
    Harness h(5, 4, config(8, 64));
    h.scheduler.add_request(make_request("r0", 4, 8));
    h.scheduler.add_request(make_request("r1", 4, 8, 20));
    EXPECT_EQ(h.step(), (Progress{{"r0", 4}, {"r1", 4}}));
    EXPECT_EQ(h.scheduler.find("r1")->block_ids, (Ids{2}));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(h.step(), (Progress{{"r0", 1}, {"r1", 1}}));
    EXPECT_EQ(h.scheduler.find("r0")->block_ids, (Ids{1, 3}));
    EXPECT_EQ(h.scheduler.find("r1")->block_ids, (Ids{2, 4}));
    EXPECT_EQ(h.step(), (Progress{{"r0", 1}}));  // step 6
    EXPECT_EQ(h.batch.preempted, std::vector<std::string>{"r1"});
    const Request* r1 = h.scheduler.find("r1");
    EXPECT_EQ(r1->status, RequestStatus::kPreempted);
    EXPECT_EQ(r1->num_computed_tokens, 0);
    EXPECT_EQ(r1->num_output_tokens(), 5);  // outputs kept
    EXPECT_EQ(h.scheduler.find("r0")->block_ids, (Ids{1, 3, 4}));
    EXPECT_EQ(h.scheduler.counters().num_preemptions, 1);
    EXPECT_EQ(h.step(), (Progress{{"r0", 1}}));  // step 7
    EXPECT_EQ(h.step(), (Progress{{"r0", 1}}));  // step 8
    EXPECT_EQ(h.finish_of("r0"), FinishReason::kLength);
    EXPECT_EQ(h.step(), (Progress{{"r1", 5}}));  // step 9
    EXPECT_EQ(r1->block_ids[0], 2);
    EXPECT_EQ(r1->num_output_tokens(), 6);
    EXPECT_EQ(h.scheduler.demand(), (PhaseDemand{.can_prefill = false, .has_decode = true}));
}

TEST(SchedulerTest, PriorityOrdersTheQueueAndPreemptsTheLowest) {
    SchedulerConfig c = config(1, 64);
    c.order = SchedulingOrder::kPriority;
    Harness h(32, 4, c);
    const auto add = [&](const char* id, int32_t priority, int64_t order) {
        auto r = make_request(id, 4, 2);
        r->priority = priority;
        r->arrival_order = order;
        h.scheduler.add_request(std::move(r));
    };
    add("late-low", 5, 0);
    add("urgent", -1, 1);
    add("normal-a", 0, 2);
    add("normal-b", 0, 3);
    // One seat: the queue runs by (priority, arrival).
    std::vector<std::string> ran;
    for (int step = 0; step < 12 && h.scheduler.has_unfinished_requests(); ++step) {
        for (const auto& [id, n] : h.step()) {
            if (ran.empty() || ran.back() != id) ran.push_back(id);
        }
    }
    EXPECT_EQ(ran, (std::vector<std::string>{"urgent", "normal-a", "normal-b", "late-low"}));

    // Out of blocks, the lowest priority running request is preempted, not the youngest.
    SchedulerConfig c2 = config(8, 64);
    c2.order = SchedulingOrder::kPriority;
    Harness p(5, 4, c2);  // 4 usable blocks
    auto hi = make_request("high", 4, 8);
    hi->priority = 0;
    hi->arrival_order = 1;
    auto lo = make_request("low", 4, 8, 20);
    lo->priority = 9;
    lo->arrival_order = 0;  // older, but lower priority
    p.scheduler.add_request(std::move(lo));
    p.scheduler.add_request(std::move(hi));
    EXPECT_EQ(p.step(), (Progress{{"high", 4}, {"low", 4}}));
    for (int i = 0; i < 4; ++i) p.step();
    p.step();  // "high" needs a third block
    EXPECT_EQ(p.batch.preempted, std::vector<std::string>{"low"});
}

TEST(SchedulerTest, PrefixHitsAreReportedAsCachedTokens) {
    Harness h(32, 4, config(8, 64));
    h.scheduler.add_request(make_request("r0", 10, 1));
    h.step();
    h.scheduler.add_request(make_request("r1", 10, 1));
    EXPECT_EQ(h.step(), (Progress{{"r1", 2}}));  // 8 of 10 prompt tokens from the cache
    ASSERT_EQ(h.outputs.size(), 1u);
    EXPECT_EQ(h.outputs[0].num_cached_tokens, 8);
    EXPECT_EQ(h.outputs[0].num_prompt_tokens, 10);
    EXPECT_EQ(h.kv.prefix_cache_hits(), 8);
    EXPECT_EQ(h.kv.prefix_cache_queries(), 20);
}

TEST(SchedulerTest, AbortFreesBlocksAtOnce) {
    Harness h(32, 4, config(8, 64));
    h.scheduler.add_request(make_request("r0", 10, 5));
    h.scheduler.add_request(make_request("r1", 10, 5, 9));
    h.step();
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 31 - 6);
    const std::vector<std::string> ids{"r0", "unknown"};
    h.scheduler.abort_requests(ids);
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 31 - 3);
    EXPECT_EQ(h.scheduler.num_running(), 1);
    EXPECT_EQ(h.step(), (Progress{{"r1", 1}}));
    EXPECT_EQ(h.finish_of("r0"), FinishReason::kAbort);
}

TEST(SchedulerTest, FailRunningFailsTheRunningAndKeepsTheQueue) {
    // Self-healing: a step failed part-way (a rank died). The running requests fail with the
    // reason and free their blocks; the waiting one stays and runs next.
    Harness h(32, 4, config(2, 64));
    h.scheduler.add_request(make_request("r0", 4, 5));
    h.scheduler.add_request(make_request("r1", 4, 5, 20));
    h.scheduler.add_request(make_request("r2", 4, 5, 40));  // waits: max_num_seqs 2
    h.step();
    ASSERT_EQ(h.scheduler.num_running(), 2);
    h.scheduler.fail_running("the group failed");
    const auto failed = h.scheduler.take_finished();
    ASSERT_EQ(failed.size(), 2u);
    for (const auto& o : failed) {
        EXPECT_EQ(o.finish_reason, FinishReason::kError);
        EXPECT_EQ(o.error, "the group failed");
    }
    EXPECT_EQ(h.kv.pool().num_free_blocks(), 31);
    EXPECT_EQ(h.scheduler.num_running(), 0);
    EXPECT_EQ(h.scheduler.num_waiting(), 1);
    EXPECT_EQ(h.step(), (Progress{{"r2", 4}}));
}

// The engine refuses only what it alone knows (the request's values were checked by
// ipc::validate_request, tests/ipc/request_validation_test.cpp): its KV capacity and its ids.
TEST(SchedulerTest, RequestsThatCanNeverFitAreRejectedWithAReason) {
    Harness h(5, 4, config(8, 64, 20));  // 4 usable blocks = 16 tokens; max_model_len 20
    h.scheduler.add_request(make_request("big", 10, 8));
    h.scheduler.add_request(make_request("ok", 4, 4));
    h.scheduler.add_request(make_request("ok", 4, 4));
    EXPECT_EQ(h.step(), (Progress{{"ok", 4}}));
    ASSERT_EQ(h.outputs.size(), 3u);
    EXPECT_EQ(h.outputs[0].finish_reason, FinishReason::kError);
    EXPECT_NE(h.outputs[0].error.find("need 5 KV cache blocks of 4 tokens, but the cache has 4"), std::string::npos)
        << h.outputs[0].error;
    EXPECT_EQ(h.outputs[1].finish_reason, FinishReason::kError);
    EXPECT_EQ(h.outputs[1].error, "request id 'ok' is already in use");
}

TEST(SchedulerTest, StopTokensRespectMinTokens) {
    // the fake "model" always samples 7: a stop token after min_tokens.
    Harness h(32, 4, config(8, 64));
    auto r = make_request("r0", 4, 10);
    r->sampling.stop_token_ids = {7};
    r->sampling.min_tokens = 3;
    h.scheduler.add_request(std::move(r));
    h.step();
    h.step();
    EXPECT_EQ(h.finish_of("r0"), FinishReason::kNone);
    h.step();
    ASSERT_EQ(h.finish_of("r0"), FinishReason::kStop);
    EXPECT_EQ(h.outputs[0].stop_token_id, 7);
}

TEST(SchedulerTest, ForcedPhasesRestrictTheStep) {
    Harness h(32, 4, config(8, 64));
    h.scheduler.add_request(make_request("r0", 4, 5));
    EXPECT_EQ(h.scheduler.demand(), (PhaseDemand{.can_prefill = true, .has_decode = false}));
    EXPECT_EQ(h.step(Phase::kDecode), Progress{});  // nothing decodes yet: dummy step
    EXPECT_TRUE(h.batch.dummy);
    EXPECT_EQ(h.batch.phase, Phase::kDecode);
    EXPECT_EQ(h.step(Phase::kPrefill), (Progress{{"r0", 4}}));
    h.scheduler.add_request(make_request("r1", 6, 5, 9));
    EXPECT_EQ(h.scheduler.demand(), (PhaseDemand{.can_prefill = true, .has_decode = true}));
    EXPECT_EQ(h.step(Phase::kPrefill), (Progress{{"r1", 6}}));  // r0's decode waits
    EXPECT_EQ(h.batch.phase, Phase::kPrefill);
    EXPECT_EQ(h.scheduler.demand(), (PhaseDemand{.can_prefill = false, .has_decode = true}));
    EXPECT_EQ(h.step(Phase::kDecode), (Progress{{"r0", 1}, {"r1", 1}}));
    EXPECT_EQ(h.step(Phase::kIdle), Progress{});
    EXPECT_TRUE(h.batch.dummy);
    EXPECT_EQ(h.batch.phase, Phase::kIdle);
}

TEST(SchedulerTest, ProposesDecodeWhenTheHeadOfWaitingDoesNotFit) {
    Harness h(4, 4, config(8, 64));  // 3 usable blocks
    h.scheduler.add_request(make_request("r0", 8, 4));
    h.step();
    h.scheduler.add_request(make_request("r1", 8, 4, 9));  // needs 2 + more blocks: only 1 free
    EXPECT_EQ(h.scheduler.demand(), (PhaseDemand{.can_prefill = false, .has_decode = true}));
}

}  // namespace
}  // namespace moeserve::engine
