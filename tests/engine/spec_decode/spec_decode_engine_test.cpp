// Speculative decoding (n-gram drafts) through EngineCore on the fake model, whose greedy outputs
// cycle (window 2) so that drafts get accepted and rejected: outputs, finish reasons, logprobs and
// seeded samples equal a run without drafts, under prefix caching, chunked prefill and preemption;
// a rejected draft leaves the block hashes, the block count and the KV content of a plain run.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/engine_test_util.h"
#include "moeserve/engine/engine_core.h"

namespace moeserve::engine {
namespace {

using namespace testing;

constexpr int32_t kWindow = 2;

SpeculativeConfig ngram(int32_t k, int32_t max_n = 3, int32_t min_n = 1) {
    return SpeculativeConfig{.method = SpeculativeConfig::Method::kNgram,
                             .num_speculative_tokens = k,
                             .prompt_lookup_max = max_n,
                             .prompt_lookup_min = min_n};
}

EngineConfig config(int32_t num_blocks, int32_t max_batched, bool caching, SpeculativeConfig spec) {
    EngineConfig c;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = max_batched;
    c.max_model_len = 128;
    c.block_size = 4;
    c.num_blocks = num_blocks;
    c.enable_prefix_caching = caching;
    c.speculative = spec;
    return c;
}

// Everything a run emitted per request: tokens, logprobs, the finishing output.
struct RunResult {
    Collected collected;
    std::map<std::string, std::vector<ipc::TokenLogprobs>> logprobs;
    ipc::Stats stats;
};

RunResult run_engine(model::Model& model, const EngineConfig& c, const std::vector<ipc::AddRequest>& adds) {
    ThreadPool pool(2);
    EngineCore engine(model, pool, c);
    RunResult out;
    for (size_t i = 0; i < adds.size(); ++i) engine.add_request(adds[i]);
    while (engine.has_unfinished_requests()) {
        for (auto& o : engine.step().outputs) {
            auto& t = out.collected.tokens[o.request_id];
            t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
            auto& l = out.logprobs[o.request_id];
            l.insert(l.end(), o.new_logprobs.begin(), o.new_logprobs.end());
            if (o.finish_reason != FinishReason::kNone) out.collected.last[o.request_id] = o;
        }
        MOESERVE_CHECK(++out.collected.steps < 10000, "engine does not finish");
    }
    const auto& p = engine.kv_cache_manager().pool();
    EXPECT_EQ(p.num_free_blocks(), p.num_blocks() - 1);
    out.stats = engine.stats();
    return out;
}

std::vector<ipc::AddRequest> greedy_requests(int n) {
    std::vector<ipc::AddRequest> adds;
    for (int i = 0; i < n; ++i) {
        const int32_t len = 3 + (i * 13) % 30;
        adds.push_back(greedy_add("r" + std::to_string(i), make_prompt(len, i % 3 == 0 ? 2 : 2 + i), 8 + (i * 7) % 20));
    }
    return adds;
}

struct Case {
    std::string name;
    int32_t num_blocks, max_batched;
    bool caching;
};

class SpecDecodeEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(SpecDecodeEquivalence, GreedyOutputsEqualThePlainRunAndAlone) {
    const Case& c = GetParam();
    FakeModel model(32, kWindow);
    const auto adds = greedy_requests(10);
    const RunResult plain = run_engine(model, config(c.num_blocks, c.max_batched, c.caching, {}), adds);
    const RunResult spec = run_engine(model, config(c.num_blocks, c.max_batched, c.caching, ngram(3)), adds);
    EXPECT_EQ(spec.collected.tokens, plain.collected.tokens);
    for (const auto& a : adds) {
        EXPECT_EQ(spec.collected.tokens.at(a.request_id),
                  greedy_alone(model, a.prompt_token_ids, a.sampling.max_tokens))
            << a.request_id;
    }
    EXPECT_GT(spec.stats.spec_num_accepted_tokens, 0);
    EXPECT_GT(spec.stats.spec_num_draft_tokens, spec.stats.spec_num_accepted_tokens);  // some were rejected
    EXPECT_LT(spec.stats.num_steps, plain.stats.num_steps);
    EXPECT_EQ(spec.stats.num_generation_tokens, plain.stats.num_generation_tokens);
    if (c.name == "preemption") {
        EXPECT_GT(spec.stats.num_preemptions, 0);
    }
    if (c.name == "prefix_caching") {
        EXPECT_GT(spec.stats.prefix_cache_hits, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Configs, SpecDecodeEquivalence,
                         ::testing::Values(Case{"prefix_caching", 200, 32, true},
                                           Case{"no_prefix_caching", 200, 32, false}, Case{"tiny_chunks", 200, 5, true},
                                           Case{"preemption", 16, 32, true}),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(SpecDecodeTest, AcceptedCountsAddUpPerPosition) {
    FakeModel model(32, kWindow);
    const RunResult spec = run_engine(model, config(200, 64, true, ngram(4)), greedy_requests(6));
    const ipc::Stats& s = spec.stats;
    ASSERT_FALSE(s.spec_num_accepted_tokens_per_pos.empty());
    EXPECT_EQ(s.spec_num_accepted_tokens_per_pos.size(), 4u);  // one per draft position
    int64_t sum = 0;
    for (size_t j = 0; j < s.spec_num_accepted_tokens_per_pos.size(); ++j) {
        sum += s.spec_num_accepted_tokens_per_pos[j];
        if (j > 0) {
            EXPECT_LE(s.spec_num_accepted_tokens_per_pos[j], s.spec_num_accepted_tokens_per_pos[j - 1]);
        }
    }
    EXPECT_EQ(sum, s.spec_num_accepted_tokens);
    EXPECT_LE(s.spec_num_draft_tokens, 4 * s.spec_num_drafts);
}

TEST(SpecDecodeTest, StopTokensMaxTokensAndLogprobsStayRight) {
    FakeModel model(32, kWindow);
    std::vector<ipc::AddRequest> adds;
    for (int i = 0; i < 12; ++i) {
        auto a = greedy_add("s" + std::to_string(i), make_prompt(4 + i, 2 + i), 1 + i * 3);
        a.sampling.stop_token_ids = {static_cast<int32_t>(2 + (i * 5) % 30)};
        a.sampling.logprobs = 2;
        if (i % 4 == 1) a.sampling.min_tokens = 3;
        adds.push_back(a);
    }
    const RunResult plain = run_engine(model, config(200, 64, true, {}), adds);
    const RunResult spec = run_engine(model, config(200, 64, true, ngram(5)), adds);
    EXPECT_EQ(spec.collected.tokens, plain.collected.tokens);
    EXPECT_GT(spec.stats.spec_num_accepted_tokens, 0);
    for (const auto& a : adds) {
        const auto& id = a.request_id;
        EXPECT_LE(spec.collected.tokens.at(id).size(), static_cast<size_t>(a.sampling.max_tokens)) << id;
        EXPECT_EQ(spec.collected.last.at(id).finish_reason, plain.collected.last.at(id).finish_reason) << id;
        EXPECT_EQ(spec.collected.last.at(id).stop_token_id, plain.collected.last.at(id).stop_token_id) << id;
        ASSERT_EQ(spec.logprobs.at(id).size(), plain.logprobs.at(id).size()) << id;
        for (size_t j = 0; j < plain.logprobs.at(id).size(); ++j) {
            const auto &x = spec.logprobs.at(id)[j], &y = plain.logprobs.at(id)[j];
            EXPECT_EQ(x.token_id, y.token_id);
            EXPECT_EQ(x.logprob, y.logprob);
            EXPECT_EQ(x.rank, y.rank);
            EXPECT_EQ(x.top, y.top);
        }
    }
}

TEST(SpecDecodeTest, SeededSamplesEqualThePlainRun) {
    // Each verified row takes one draw of the request's stream, as a plain decode step does.
    FakeModel model(32, kWindow);
    std::vector<ipc::AddRequest> adds;
    for (int i = 0; i < 8; ++i) {
        auto a = greedy_add("t" + std::to_string(i), make_prompt(6 + i, 2 + i), 30);
        a.sampling.temperature = 0.3f + 0.1f * static_cast<float>(i % 3);
        a.sampling.top_k = i % 2 == 0 ? 0 : 5;
        a.sampling.top_p = i % 3 == 0 ? 0.9f : 1.0f;
        a.sampling.seed = 100 + i;
        adds.push_back(a);
    }
    const RunResult plain = run_engine(model, config(200, 64, true, {}), adds);
    const RunResult spec = run_engine(model, config(200, 64, true, ngram(3)), adds);
    EXPECT_EQ(spec.collected.tokens, plain.collected.tokens);
    EXPECT_GT(spec.stats.spec_num_accepted_tokens, 0);
}

TEST(SpecDecodeTest, OutputDependentProcessingSeesTheDraftsBeforeEachPosition) {
    // Penalties, bad words and min_tokens depend on the outputs before each verified position:
    // the sampler processes each row with the drafts before it as outputs, so these requests
    // draft next to the others and their outputs stay those of a plain run.
    FakeModel model(32, kWindow);
    auto adds = greedy_requests(6);
    adds[1].sampling.presence_penalty = 0.5f;
    adds[2].sampling.frequency_penalty = 0.7f;
    adds[3].sampling.repetition_penalty = 1.3f;
    adds[4].sampling.min_tokens = 6;
    adds[5].sampling.bad_words_token_ids = {{3, 4}};
    const RunResult plain = run_engine(model, config(200, 64, true, {}), adds);
    const RunResult spec = run_engine(model, config(200, 64, true, ngram(3)), adds);
    EXPECT_EQ(spec.collected.tokens, plain.collected.tokens);
    EXPECT_GT(spec.stats.spec_num_accepted_tokens, 0);
}

// After each step of one request: its block hashes, blocks, computed tokens and the KV (token,
// position) of every computed position, keyed by its number of outputs.
struct Snapshot {
    std::vector<uint64_t> block_hashes;
    size_t num_blocks = 0;
    int32_t num_computed = 0;
    std::vector<std::pair<int32_t, int32_t>> kv;
    bool operator==(const Snapshot&) const = default;
};

std::map<int32_t, Snapshot> snapshots(FakeModel& model, const EngineConfig& c, const ipc::AddRequest& add,
                                      std::vector<uint64_t>* cached_after, ipc::Stats* stats) {
    ThreadPool pool(1);
    EngineCore engine(model, pool, c);
    const FakeKvCache& kv = *model.last_kv_cache;
    engine.add_request(add);
    std::map<int32_t, Snapshot> out;
    std::vector<uint64_t> last_hashes;
    while (engine.has_unfinished_requests()) {
        engine.step();
        const Request* r = engine.scheduler().find(add.request_id);
        if (r == nullptr) break;
        // The hashes of blocks whose KV is computed (a speculative step may already know the next).
        const auto num_full = static_cast<size_t>(r->num_computed_tokens / c.block_size);
        Snapshot s{std::vector<uint64_t>(r->block_hashes.begin(),
                                         r->block_hashes.begin() +
                                             static_cast<std::ptrdiff_t>(std::min(num_full, r->block_hashes.size()))),
                   r->block_ids.size(),
                   r->num_computed_tokens,
                   {}};
        for (int32_t p = 0; p < r->num_computed_tokens; ++p) {
            const auto slot = static_cast<size_t>(r->block_ids[static_cast<size_t>(p / c.block_size)] * c.block_size +
                                                  p % c.block_size);
            s.kv.emplace_back(kv.tokens[slot], kv.positions[slot]);
        }
        last_hashes = r->block_hashes;
        out[r->num_output_tokens()] = std::move(s);
    }
    // Which of the request's full-block hashes the prefix cache holds once it finished.
    for (uint64_t h : last_hashes) {
        if (engine.kv_cache_manager().pool().lookup(h)) cached_after->push_back(h);
    }
    *stats = engine.stats();
    return out;
}

TEST(SpecDecodeTest, RejectedDraftsLeaveTheStateOfAPlainRun) {
    FakeModel model(32, kWindow);
    auto add = greedy_add("r", make_prompt(9, 5), 60);
    std::vector<uint64_t> plain_cached, spec_cached;
    ipc::Stats plain_stats, spec_stats;
    const auto plain = snapshots(model, config(64, 64, true, {}), add, &plain_cached, &plain_stats);
    const auto spec = snapshots(model, config(64, 64, true, ngram(4)), add, &spec_cached, &spec_stats);
    EXPECT_GT(spec_stats.spec_num_accepted_tokens, 0);
    EXPECT_GT(spec_stats.spec_num_draft_tokens, spec_stats.spec_num_accepted_tokens);  // some rejected
    int compared = 0;
    for (const auto& [num_outputs, s] : spec) {
        const auto it = plain.find(num_outputs);
        ASSERT_NE(it, plain.end()) << num_outputs;
        EXPECT_EQ(s.block_hashes, it->second.block_hashes) << num_outputs;
        EXPECT_EQ(s.num_blocks, it->second.num_blocks) << num_outputs;
        EXPECT_EQ(s.num_computed, it->second.num_computed) << num_outputs;
        EXPECT_EQ(s.kv, it->second.kv) << num_outputs;
        ++compared;
    }
    EXPECT_LT(compared, static_cast<int>(plain.size()));  // several tokens per step
    EXPECT_GT(compared, 5);
    EXPECT_EQ(spec_cached, plain_cached);
    EXPECT_FALSE(plain_cached.empty());
}

}  // namespace
}  // namespace moeserve::engine
