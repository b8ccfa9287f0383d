// EPLB (#31) on the tiny Qwen3-MoE over EP=2, its router skewed onto two experts of one rank: the
// imbalance drops after the move, and the logits before, during and after it equal the
// single-rank model's. The placement and balancer unit tests are tests/eplb/.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "model/model_test_util.h"
#include "moeserve/core/error.h"
#include "moeserve/model/eplb/expert_balancer.h"
#include "moeserve/model/registry.h"
#include "moeserve/parallel/groups.h"
#include "moeserve/testing/sequence_runner.h"

namespace moeserve::model {
namespace {

using namespace std::chrono_literals;
using moeserve::testing::SequenceRunner;
using parallel::ParallelSizes;

// The tiny Qwen3-MoE over EP=2 (dp=2), its router skewed onto experts 2 and 3 (both on rank 0).
struct EplbRun {
    std::vector<float> logits;
    std::vector<int32_t> tokens;  // decode tokens fed after the prompt
    double imbalance_before = 0, imbalance_after = 0;
    int64_t moved = 0;
    std::string error;
};

constexpr const char* kSkew = "2,3:20";  // both on rank 0, without a copy in the initial redundant slots

std::vector<EplbRun> run_eplb_world(const std::vector<int32_t>& prompt, int64_t redundant) {
    parallel::LocalWorld world = parallel::make_local_world(ParallelSizes{2, 1, 2}, 20s);
    std::vector<EplbRun> runs(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
            EplbRun& run = runs[static_cast<size_t>(r)];
            try {
                ThreadPool pool(1);
                LoadOptions o{.max_model_len = 256};
                o.parallel = ParallelConfig::from_context(world.ranks[static_cast<size_t>(r)]);
                o.eplb = {.enabled = true, .window_size = 4, .step_interval = 4, .num_redundant_experts = redundant};
                o.debug_router_skew = kSkew;
                auto model = load_model(MOESERVE_QWEN3_TINY_DIR, pool, o);
                SequenceRunner runner(*model, 256, 16);
                runner.set_moe_exchange(parallel::MoeExchangeKind::kAllGather);
                run.logits = runner.append(prompt, 0, true);
                runner.set_moe_exchange(parallel::MoeExchangeKind::kAllToAll);
                // decode until a decision has seen the moved placement (every rank agrees when to stop)
                int64_t decided_when_moved = -1;
                for (int step = 0; step < 200; ++step) {
                    const int32_t id = prompt[static_cast<size_t>(step) % prompt.size()];
                    run.tokens.push_back(id);
                    const auto row = runner.append(std::span<const int32_t>(&id, 1));
                    run.logits.insert(run.logits.end(), row.begin(), row.end());
                    const ExpertLoadStats& s = *model->expert_load();
                    if (s.decisions == 1 && run.imbalance_before == 0) run.imbalance_before = s.imbalance;
                    if (s.rebalances >= 1 && decided_when_moved < 0) decided_when_moved = s.decisions;
                    std::vector<int64_t> not_done{decided_when_moved < 0 || s.decisions <= decided_when_moved ? 1 : 0};
                    world.ranks[static_cast<size_t>(r)].ep->all_reduce_max(std::span<int64_t>(not_done));
                    if (not_done[0] == 0) break;
                }
                run.imbalance_after = model->expert_load()->imbalance;
                run.moved = model->expert_load()->moved_slots;
            } catch (const std::exception& e) {
                run.error = e.what();
            }
        });
    }
    for (auto& t : threads) t.join();
    return runs;
}

class EplbModelTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(EplbModelTest, SkewedRouterIsBalancedAndLogitsStayTheSame) {
    const std::vector<int32_t> prompt = testutil::parse_ids(MOESERVE_QWEN3_PROMPT);
    const std::vector<EplbRun> runs = run_eplb_world(prompt, GetParam());
    for (const EplbRun& run : runs) ASSERT_TRUE(run.error.empty()) << run.error;
    ASSERT_EQ(runs[0].tokens, runs[1].tokens);
    // the reference: one rank, no EPLB, the same skew and tokens
    ThreadPool pool(1);
    auto single =
        load_model(MOESERVE_QWEN3_TINY_DIR, pool, LoadOptions{.max_model_len = 256, .debug_router_skew = kSkew});
    SequenceRunner runner(*single, 256, 16);
    std::vector<float> ref = runner.append(prompt, 0, true);
    for (int32_t id : runs[0].tokens) {
        const auto row = runner.append(std::span<const int32_t>(&id, 1));
        ref.insert(ref.end(), row.begin(), row.end());
    }
    const int64_t vocab = single->info().vocab_size;
    for (size_t r = 0; r < runs.size(); ++r) {
        const EplbRun& run = runs[r];
        // f32 partial sums in another order (EP combine): the bound of parallel_model_test
        EXPECT_LE(testutil::max_abs_diff(run.logits, ref), 2e-5f * testutil::max_abs(ref)) << "rank " << r;
        for (int64_t row = 0; row * vocab < static_cast<int64_t>(ref.size()); ++row) {
            EXPECT_EQ(testutil::argmax(run.logits.data() + row * vocab, vocab),
                      testutil::argmax(ref.data() + row * vocab, vocab))
                << "rank " << r << " row " << row;
        }
        EXPECT_GT(run.imbalance_before, 1.8) << "both hot experts on rank 0";
        EXPECT_LT(run.imbalance_after, 1.2);
        EXPECT_GT(run.moved, 0);
    }
    std::printf("EPLB redundant %lld: max/mean %.3f -> %.3f after %zu decode steps, %lld slots moved\n",
                static_cast<long long>(GetParam()), runs[0].imbalance_before, runs[0].imbalance_after,
                runs[0].tokens.size(), static_cast<long long>(runs[0].moved));
}

INSTANTIATE_TEST_SUITE_P(Redundant, EplbModelTest, ::testing::Values(0, 2));

TEST(EplbModelTest, RefusedWithoutExpertParallelism) {
    ThreadPool pool(1);
    LoadOptions o{.max_model_len = 256};
    o.eplb.enabled = true;
    try {
        load_model(MOESERVE_QWEN3_TINY_DIR, pool, o);
        FAIL() << "loaded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--enable-eplb"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace moeserve::model
