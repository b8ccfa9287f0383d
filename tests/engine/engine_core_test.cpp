// EngineCore on the fake model: batched greedy outputs equal each prompt alone, under chunked
// prefill, prefix caching and preemption; a random run with aborts keeps the block invariant;
// n > 1 fan-out shares the prompt's blocks; prompt logprobs; phases.
#include "moeserve/engine/engine_core.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine_test_util.h"
#include "moeserve/ipc/request_validation.h"

namespace moeserve::engine {
namespace {

using namespace testing;

EngineConfig small_config(int32_t num_blocks, int32_t max_batched = 32, bool caching = true) {
    EngineConfig c;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = max_batched;
    c.max_model_len = 128;
    c.block_size = 4;
    c.num_blocks = num_blocks;
    c.enable_prefix_caching = caching;
    return c;
}

struct Case {
    std::string name;
    EngineConfig config;
};

class EngineCoreEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(EngineCoreEquivalence, BatchedGreedyEqualsAlone) {
    // 10 prompts of 3..40 tokens (some sharing prefixes) arriving over the first 6 steps.
    FakeModel model;
    ThreadPool pool(1);
    EngineCore engine(model, pool, GetParam().config);
    std::map<int, std::vector<ipc::AddRequest>> arrivals;
    std::map<std::string, std::vector<int32_t>> expected;
    for (int i = 0; i < 10; ++i) {
        const int32_t len = 3 + (i * 13) % 38;
        auto prompt = make_prompt(len, i % 3 == 0 ? 2 : 2 + i);
        const int32_t max_tokens = 4 + (i * 7) % 12;
        const std::string id = "r" + std::to_string(i);
        expected[id] = greedy_alone(model, prompt, max_tokens);
        arrivals[i % 6].push_back(greedy_add(id, prompt, max_tokens));
    }
    const Collected got = run_to_completion(engine, arrivals);
    EXPECT_EQ(got.tokens, expected);
    const auto& kv = engine.kv_cache_manager();
    EXPECT_EQ(kv.pool().num_free_blocks(), kv.pool().num_blocks() - 1);
    if (GetParam().name == "preemption") {
        EXPECT_GT(engine.stats().num_preemptions, 0);
    }
    if (GetParam().name == "prefix_caching") {
        EXPECT_GT(engine.stats().prefix_cache_hits, 0);
    }
}

EngineConfig no_chunking() {
    EngineConfig c = small_config(200, 128, false);
    c.enable_chunked_prefill = false;
    return c;
}

INSTANTIATE_TEST_SUITE_P(Configs, EngineCoreEquivalence,
                         ::testing::Values(Case{"prefix_caching", small_config(200)},
                                           Case{"no_prefix_caching", small_config(200, 32, false)},
                                           Case{"tiny_chunks", small_config(200, 5)},
                                           Case{"no_chunking", no_chunking()},
                                           Case{"preemption", small_config(16, 32)}),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(EngineCoreTest, RandomRunWithAbortsKeepsTheBlockInvariant) {
    FakeModel model;
    ThreadPool pool(1);
    for (uint64_t seed = 0; seed < 5; ++seed) {
        EngineCore engine(model, pool, small_config(20, 16));
        Rng rng(seed);
        std::vector<std::string> live;
        int next_id = 0;
        for (int step = 0; step < 300; ++step) {
            if (step < 200 && rng.uniform() < 0.4f) {
                const auto len = static_cast<int32_t>(1 + rng.next_u64() % 30);
                const std::string id = "r" + std::to_string(next_id++);
                auto add = greedy_add(id, make_prompt(len, static_cast<int32_t>(2 + rng.next_u64() % 4)),
                                      static_cast<int32_t>(1 + rng.next_u64() % 20));
                engine.add_request(add);
                live.push_back(id);
            }
            if (!live.empty() && rng.uniform() < 0.1f) {
                engine.abort(ipc::Abort{{live[rng.next_u64() % live.size()]}});
            }
            for (const auto& o : engine.step().outputs) {
                if (o.finish_reason != FinishReason::kNone) std::erase(live, o.request_id);
            }
        }
        while (engine.has_unfinished_requests()) engine.step();
        const auto& p = engine.kv_cache_manager().pool();
        EXPECT_EQ(p.num_free_blocks(), p.num_blocks() - 1) << "seed " << seed;
        EXPECT_GT(engine.stats().num_preemptions, 0) << "seed " << seed;
    }
}

TEST(EngineCoreTest, ParallelSamplesShareThePromptBlocks) {
    // n = 3 fanned out as "<id>-<i>", arriving together: the first one computes the 12-token
    // prompt's blocks, the others hit 2 of its 3 full blocks (the last one is recomputed: the
    // cache never covers a request's final prompt token).
    FakeModel model;
    ThreadPool pool(1);
    EngineCore engine(model, pool, small_config(64));
    const auto prompt = make_prompt(12);
    for (int i = 0; i < 3; ++i) engine.add_request(greedy_add("a-" + std::to_string(i), prompt, 4));
    const StepOutcome first = engine.step();
    EXPECT_EQ(first.num_tokens, 12 + 4 + 4);
    const auto* r0 = engine.scheduler().find("a-0");
    const auto* r2 = engine.scheduler().find("a-2");
    ASSERT_TRUE(r0 && r2);
    EXPECT_EQ(r2->block_ids[0], r0->block_ids[0]);
    EXPECT_EQ(r2->block_ids[1], r0->block_ids[1]);
    EXPECT_EQ(engine.kv_cache_manager().pool().ref_count(r0->block_ids[0]), 3);
    ASSERT_EQ(first.outputs.size(), 3u);
    EXPECT_EQ(first.outputs[2].num_cached_tokens, 8);
    const Collected rest = run_to_completion(engine);
    EXPECT_EQ(engine.kv_cache_manager().pool().num_free_blocks(), 63);
}

TEST(EngineCoreTest, PromptLogprobsCoverEveryPromptTokenAfterTheFirst) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore engine(model, pool, small_config(64, 5));  // chunks of 5: logprobs span chunks
    auto add = greedy_add("p", make_prompt(13), 2);
    add.sampling.prompt_logprobs = 2;
    add.sampling.logprobs = 1;
    engine.add_request(add);
    std::optional<std::vector<ipc::TokenLogprobs>> prompt_lp;
    while (engine.has_unfinished_requests()) {
        for (auto& o : engine.step().outputs) {
            if (o.prompt_logprobs) prompt_lp = o.prompt_logprobs;
            if (!o.new_token_ids.empty()) {
                ASSERT_EQ(o.new_logprobs.size(), 1u);
                EXPECT_EQ(o.new_logprobs[0].rank, 1);  // greedy
                EXPECT_EQ(o.new_logprobs[0].top.size(), 1u);
            }
        }
    }
    ASSERT_TRUE(prompt_lp);
    ASSERT_EQ(prompt_lp->size(), 12u);
    // The same from the logits of every position computed alone.
    moeserve::testing::SequenceRunner runner(model, 13, 16);
    const auto prompt = make_prompt(13);
    const std::vector<float> all = runner.append(prompt, 0, /*all_logits=*/true);
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
        const auto want = compute_logprobs(all.data() + p * 32, 32, prompt[p + 1], 2);
        EXPECT_EQ((*prompt_lp)[p].token_id, prompt[p + 1]);
        EXPECT_FLOAT_EQ((*prompt_lp)[p].logprob, want.logprob);
        EXPECT_EQ((*prompt_lp)[p].top, want.top);
    }
}

TEST(EngineCoreTest, ForcedPhasesAndProposals) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore engine(model, pool, small_config(64));
    EXPECT_EQ(engine.demand(), (PhaseDemand{.can_prefill = false, .has_decode = false}));
    StepOutcome idle = engine.step(Phase::kIdle);
    EXPECT_TRUE(idle.dummy);
    engine.add_request(greedy_add("a", make_prompt(6), 3));
    EXPECT_EQ(engine.demand(), (PhaseDemand{.can_prefill = true, .has_decode = false}));
    EXPECT_TRUE(engine.step(Phase::kDecode).dummy);
    const StepOutcome pre = engine.step(Phase::kPrefill);
    EXPECT_EQ(pre.phase, Phase::kPrefill);
    EXPECT_FALSE(pre.dummy);
    EXPECT_EQ(engine.demand(), (PhaseDemand{.can_prefill = false, .has_decode = true}));
    EXPECT_EQ(engine.step().phase, Phase::kDecode);
    const ipc::Stats s = engine.stats();
    EXPECT_EQ(s.num_steps, 4);
    EXPECT_EQ(s.num_dummy_steps, 2);
    EXPECT_EQ(s.num_prefill_steps, 1);
    EXPECT_EQ(s.num_decode_steps, 1);
    EXPECT_EQ(s.num_generation_tokens, 2);
}

TEST(EngineCoreTest, RejectionsComeBackAsErrorOutputs) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore engine(model, pool, small_config(4));  // 3 usable blocks = 12 tokens
    engine.add_request(greedy_add("big", {2, 3, 4}, 10));
    const StepOutcome o = engine.step();
    ASSERT_EQ(o.outputs.size(), 1u);
    EXPECT_EQ(o.outputs[0].finish_reason, FinishReason::kError);
    EXPECT_NE(o.outputs[0].error.find("need 4 KV cache blocks of 4 tokens, but the cache has 3"), std::string::npos)
        << o.outputs[0].error;
    EXPECT_FALSE(engine.has_unfinished_requests());
}

// The engine knows no EOS of its own: a request stops at its stop_token_ids, which
// ipc::validate_request filled with the EOS set (once, when the client also listed an EOS id)
// unless the request ignores EOS; the engine does not check the values again.
TEST(EngineCoreTest, StopsOnlyAtTheValidatedStopTokens) {
    FakeModel model;
    ThreadPool pool(1);
    EngineCore engine(model, pool, small_config(64));
    const std::vector<int32_t> prompt = {2, 3, 4, 5};
    const std::vector<int32_t> alone = greedy_alone(model, prompt, 6);
    const int32_t eos = alone[2];  // stands for the model's EOS set
    ASSERT_EQ(std::count(alone.begin(), alone.begin() + 2, eos), 0) << "pick a prompt whose third token is new";
    const ipc::RequestLimits limits{.max_model_len = 128, .vocab_size = 32, .eos_token_ids = {eos}};
    ipc::AddRequest listed = greedy_add("listed", prompt, 6);
    listed.sampling.stop_token_ids = {eos};  // the client's stop token is also an EOS id
    listed = ipc::validate_request(listed, /*ignore_eos=*/false, limits);
    EXPECT_EQ(listed.sampling.stop_token_ids, std::vector<int32_t>{eos});
    const ipc::AddRequest ignoring = ipc::validate_request(greedy_add("ignoring", prompt, 6), true, limits);
    EXPECT_TRUE(ignoring.sampling.stop_token_ids.empty());
    const Collected got = run_to_completion(engine, {{0, {listed, ignoring}}});
    EXPECT_EQ(got.tokens.at("listed"), std::vector<int32_t>(alone.begin(), alone.begin() + 3));
    EXPECT_EQ(got.last.at("listed").finish_reason, FinishReason::kStop);
    EXPECT_EQ(got.last.at("listed").stop_token_id, std::optional<int32_t>(eos));
    EXPECT_EQ(got.tokens.at("ignoring"), alone);
    EXPECT_EQ(got.last.at("ignoring").finish_reason, FinishReason::kLength);
}

}  // namespace
}  // namespace moeserve::engine
