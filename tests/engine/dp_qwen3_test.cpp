// The DP + EP step protocol on the real tiny Qwen3-MoE (fixture qwen3_moe_tiny_model): dp = 2 and
// dp = 4 ranks as threads over LocalComm, experts split across them (ep = dp, and ep = 2 < dp), each rank its own
// EngineCore + DpCoordinator, requests spread unevenly and arriving mid-run, PD hybrid on and off:
// every request's greedy tokens equal the single-rank SequenceRunner result, the phase timelines
// line up, dummies run exactly where a rank had nothing of the phase. A rank that disagrees on the
// phase (debug options) makes the step fail in bounded time instead of hanging.
#include <gtest/gtest.h>

#include "engine/dp_test_util.h"
#include "moeserve/engine/timed_communicator.h"
#include "moeserve/model/registry.h"

namespace moeserve::engine {
namespace {

using namespace testing;
using namespace std::chrono_literals;

const std::filesystem::path kModelDir = MOESERVE_QWEN3_TINY_DIR;
constexpr int kNumPrompts = 6;
constexpr int32_t kMaxTokens = 6;

// A rank's sharded model with its EP communicator wrapped in a TimedCommunicator.
class TimedModel final : public model::Model {
public:
    TimedModel(parallel::ParallelContext& ctx, ThreadPool& pool, bool flip) {
        model::LoadOptions o{.max_model_len = 256};
        o.parallel = model::ParallelConfig::from_context(ctx);
        if (o.parallel.ep) {
            timer_ = std::make_unique<TimedCommunicator>(*o.parallel.ep);
            o.parallel.ep = timer_.get();
        }
        o.parallel.debug_flip_moe_exchange = flip;
        inner_ = model::load_model(kModelDir, pool, o);
    }
    const model::ModelInfo& info() const override { return inner_->info(); }
    std::unique_ptr<model::KvCache> create_kv_cache(int64_t n, int64_t bs) const override {
        return inner_->create_kv_cache(n, bs);
    }
    TensorView forward(const model::ForwardBatch& b, model::KvCache& kv) override { return inner_->forward(b, kv); }
    const TimedCommunicator* timer() const { return timer_.get(); }

private:
    std::unique_ptr<TimedCommunicator> timer_;
    std::unique_ptr<model::Model> inner_;
};

class DpQwen3Test : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        pool_ = new ThreadPool(1);
        auto model = model::load_model(kModelDir, *pool_, model::LoadOptions{.max_model_len = 256});
        Rng rng(5);
        for (int i = 0; i < kNumPrompts; ++i) {
            std::vector<int32_t> p;
            const int len = 4 + (i * 9) % 23;  // 4..26 tokens: some take two prefill chunks
            for (int k = 0; k < len; ++k) p.push_back(static_cast<int32_t>(rng.next_u64() % 150000));
            prompts_->push_back(p);
            expected_->push_back(greedy_alone(*model, p, kMaxTokens));
        }
    }
    static void TearDownTestSuite() { delete pool_; }

    static DpWorldSpec spec(int dp, bool hybrid, int flip_rank = -1, std::chrono::milliseconds timeout = 30s,
                            int ep = 0) {
        DpWorldSpec s;
        s.sizes = {dp, 1, ep > 0 ? ep : dp};
        s.timeout = timeout;
        s.engine.max_num_seqs = 16;
        s.engine.max_num_batched_tokens = 16;  // chunked prefill of the longer prompts
        s.engine.max_model_len = 256;
        s.engine.block_size = 16;
        s.engine.num_blocks = 32;
        s.pd_hybrid = hybrid;
        s.make_model = [flip_rank](parallel::ParallelContext& ctx, ThreadPool& pool) -> std::unique_ptr<model::Model> {
            return std::make_unique<TimedModel>(ctx, pool, ctx.groups.dp_rank == flip_rank);
        };
        s.on_done = [](int, model::Model& m, RankRun& run) {
            if (const auto* t = static_cast<TimedModel&>(m).timer()) {
                run.ep_calls = t->calls();
                run.ep_seconds = t->seconds();
            }
        };
        return s;
    }

    // Request i goes to rank ranks[i] at round rounds[i].
    static std::vector<Arrivals> arrivals(int dp, const std::vector<int>& ranks, const std::vector<int64_t>& rounds) {
        std::vector<Arrivals> a(static_cast<size_t>(dp));
        for (size_t i = 0; i < ranks.size(); ++i) {
            a[static_cast<size_t>(ranks[i])][rounds[i]].push_back(
                greedy_add("r" + std::to_string(i), (*prompts_)[i], kMaxTokens));
        }
        return a;
    }

    static void expect_equal_single_rank(const std::vector<RankRun>& runs, size_t num_requests, bool hybrid) {
        for (size_t r = 0; r < runs.size(); ++r)
            ASSERT_TRUE(runs[r].error.empty()) << "rank " << r << ": " << runs[r].error;
        size_t seen = 0;
        for (const auto& run : runs) {
            for (const auto& [id, tokens] : run.collected.tokens) {
                const size_t i = std::stoul(id.substr(1));
                EXPECT_EQ(tokens, (*expected_)[i]) << id;
                ++seen;
            }
        }
        EXPECT_EQ(seen, num_requests);
        int64_t dummies = 0;
        for (size_t r = 0; r < runs.size(); ++r) {
            const auto& t = runs[r].timeline;
            ASSERT_EQ(t.size(), runs[0].timeline.size());
            for (size_t i = 0; i < t.size(); ++i) {
                ASSERT_EQ(t[i].phase, runs[0].timeline[i].phase) << "rank " << r << " round " << i;
                if (t[i].phase == StepPhase::kIdle) continue;
                const bool work = t[i].phase == StepPhase::kPrefill  ? t[i].voted_prefill
                                  : t[i].phase == StepPhase::kDecode ? t[i].voted_decode
                                                                     : t[i].voted_prefill || t[i].voted_decode;
                EXPECT_EQ(t[i].dummy, !work) << "rank " << r << " round " << i;
                EXPECT_EQ(t[i].phase == StepPhase::kMixed, !hybrid);
            }
            const auto& c = runs[r].counters;
            dummies += c.dummy_prefill_steps + c.dummy_decode_steps + c.dummy_mixed_steps;
            EXPECT_GT(runs[r].ep_calls, 0);
        }
        EXPECT_GT(dummies, 0);
    }

    static void print(const char* label, const std::vector<RankRun>& runs) {
        for (size_t r = 0; r < runs.size(); ++r) {
            const auto& c = runs[r].counters;
            std::printf(
                "[ figures  ] %s rank %zu: rounds %lld (prefill %lld decode %lld mixed %lld idle %lld), dummy "
                "prefill %lld decode %lld mixed %lld, stalled decodes %lld, control %.1f ms, forward %.1f ms, "
                "EP collectives %lld in %.1f ms\n",
                label, r, (long long)c.rounds, (long long)c.prefill_steps, (long long)c.decode_steps,
                (long long)c.mixed_steps, (long long)c.idle_rounds, (long long)c.dummy_prefill_steps,
                (long long)c.dummy_decode_steps, (long long)c.dummy_mixed_steps, (long long)c.decode_requests_stalled,
                c.control_seconds * 1e3, c.forward_seconds * 1e3, (long long)runs[r].ep_calls,
                runs[r].ep_seconds * 1e3);
        }
    }

    static inline ThreadPool* pool_ = nullptr;
    static inline auto* prompts_ = new std::vector<std::vector<int32_t>>();
    static inline auto* expected_ = new std::vector<std::vector<int32_t>>();
};

TEST_F(DpQwen3Test, Dp2OneRankGetsAll) {
    for (bool hybrid : {false, true}) {
        const auto runs = run_dp_world(spec(2, hybrid), arrivals(2, {0, 0, 0, 0}, {0, 0, 2, 5}));
        expect_equal_single_rank(runs, 4, hybrid);
        print(hybrid ? "dp2 one-rank hybrid" : "dp2 one-rank mixed", runs);
        EXPECT_GT(runs[1].stats.num_dummy_steps, 0);
        EXPECT_EQ(runs[1].counters.rounds - runs[1].counters.idle_rounds,
                  runs[1].counters.dummy_prefill_steps + runs[1].counters.dummy_decode_steps +
                      runs[1].counters.dummy_mixed_steps);  // rank 1 only ever ran dummies
    }
}

TEST_F(DpQwen3Test, Dp2FiveRequestsArrivingMidRun) {
    for (bool hybrid : {false, true}) {
        const auto runs = run_dp_world(spec(2, hybrid), arrivals(2, {0, 1, 0, 1, 0}, {0, 0, 3, 6, 9}));
        expect_equal_single_rank(runs, 5, hybrid);
        print(hybrid ? "dp2 5-req hybrid" : "dp2 5-req mixed", runs);
    }
}

TEST_F(DpQwen3Test, Dp4UnevenRequests) {
    for (int ep : {4, 2}) {  // ep = 2: two EP groups [0 1] [2 3], the DP control still spans all four
        for (bool hybrid : {false, true}) {
            const auto runs =
                run_dp_world(spec(4, hybrid, -1, 30s, ep), arrivals(4, {0, 1, 2, 0, 1, 0}, {0, 0, 1, 2, 4, 8}));
            expect_equal_single_rank(runs, 6, hybrid);
            const std::string label = "dp4 ep" + std::to_string(ep) + (hybrid ? " hybrid" : " mixed");
            print(label.c_str(), runs);
        }
    }
}

// Without agreement on the phase the ranks pick different MoE exchanges: the step fails with an
// Error on every rank within the communicator timeout (2 s here) instead of hanging.
TEST_F(DpQwen3Test, PhaseMismatchFailsInBoundedTime) {
    struct Variant {
        const char* name;
        int flip_rank;        // the model runs the other exchange than the step asked for
        int64_t force_phase;  // rank 1 believes this phase whatever the votes say
    };
    for (const Variant v : {Variant{"model exchange flipped on rank 1", 1, -1},
                            Variant{"rank 1 forced to decode", -1, static_cast<int64_t>(StepPhase::kDecode)}}) {
        DpWorldSpec s = spec(2, true, v.flip_rank, 2s);
        if (v.force_phase >= 0) {
            s.tweak = [&v](int rank, DpCoordinatorOptions& o) { o.debug_force_phase = rank == 1 ? v.force_phase : -1; };
        }
        const auto t0 = std::chrono::steady_clock::now();
        const auto runs = run_dp_world(s, arrivals(2, {0, 0}, {0, 1}));
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (size_t r = 0; r < runs.size(); ++r) {
            EXPECT_FALSE(runs[r].error.empty()) << v.name << ": rank " << r << " finished without an error";
            std::printf("[ figures  ] %s: rank %zu failed after %.2f s: %s\n", v.name, r, secs, runs[r].error.c_str());
        }
    }
}

}  // namespace
}  // namespace moeserve::engine
