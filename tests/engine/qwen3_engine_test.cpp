// EngineCore on the tiny Qwen3-MoE model (fixture qwen3_moe_tiny_model): greedy outputs of
// prompts of different lengths, arriving at different steps and batched together, equal each
// prompt run alone through SequenceRunner, with prefix caching hits, chunked prefill, and a KV
// cache small enough to force preemption.
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "moeserve/model/registry.h"

namespace moeserve::engine {
namespace {

using namespace testing;

const std::filesystem::path kModelDir = MOESERVE_QWEN3_TINY_DIR;

class Qwen3EngineTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        pool_ = new ThreadPool(2);
        model_ = model::load_model(kModelDir, *pool_, model::LoadOptions{.max_model_len = 256}).release();
        // 64 prompts of 5..66 tokens; every third shares a 32-token prefix (prefix-cache hits).
        Rng rng(11);
        std::vector<int32_t> shared;
        for (int i = 0; i < 32; ++i) shared.push_back(static_cast<int32_t>(rng.next_u64() % 150000));
        for (int i = 0; i < kNumPrompts; ++i) {
            std::vector<int32_t> p = i % 3 == 0 ? shared : std::vector<int32_t>{};
            const int extra = 5 + (i * 11) % 30;
            for (int k = 0; k < extra; ++k) p.push_back(static_cast<int32_t>(rng.next_u64() % 150000));
            prompts_->push_back(p);
            expected_->push_back(greedy_alone(*model_, p, kMaxTokens));
        }
    }
    static void TearDownTestSuite() {
        delete model_;
        delete pool_;
    }

    static Collected run(const EngineConfig& config) {
        EngineCore engine(*model_, *pool_, config);
        std::map<int, std::vector<ipc::AddRequest>> arrivals;
        for (size_t i = 0; i < prompts_->size(); ++i) {
            arrivals[static_cast<int>(i % 8) * 2].push_back(
                greedy_add("r" + std::to_string(i), (*prompts_)[i], kMaxTokens));
        }
        Collected c = run_to_completion(engine, arrivals);
        const auto& pool = engine.kv_cache_manager().pool();
        EXPECT_EQ(pool.num_free_blocks(), pool.num_blocks() - 1);
        stats_ = engine.stats();
        return c;
    }
    static void expect_alone_outputs(const Collected& c) {
        for (size_t i = 0; i < prompts_->size(); ++i) {
            const std::string id = "r" + std::to_string(i);
            ASSERT_TRUE(c.tokens.count(id)) << id;
            EXPECT_EQ(c.tokens.at(id), (*expected_)[i]) << id << " (" << (*prompts_)[i].size() << " prompt tokens)";
        }
    }
    static EngineConfig config() {
        EngineConfig c;
        c.max_num_seqs = 64;
        c.max_num_batched_tokens = 512;
        c.max_model_len = 256;
        c.block_size = 8;
        c.num_blocks = 1024;
        return c;
    }

    static constexpr int kNumPrompts = 64;
    static constexpr int32_t kMaxTokens = 10;
    static ThreadPool* pool_;
    static model::Model* model_;
    static std::vector<std::vector<int32_t>>* prompts_;
    static std::vector<std::vector<int32_t>>* expected_;
    static ipc::Stats stats_;
};
ThreadPool* Qwen3EngineTest::pool_ = nullptr;
model::Model* Qwen3EngineTest::model_ = nullptr;
std::vector<std::vector<int32_t>>* Qwen3EngineTest::prompts_ = new std::vector<std::vector<int32_t>>();
std::vector<std::vector<int32_t>>* Qwen3EngineTest::expected_ = new std::vector<std::vector<int32_t>>();
ipc::Stats Qwen3EngineTest::stats_;

TEST_F(Qwen3EngineTest, BatchedGreedyEqualsAloneWithoutPrefixCaching) {
    EngineConfig c = config();
    c.enable_prefix_caching = false;
    expect_alone_outputs(run(c));
    EXPECT_EQ(stats_.prefix_cache_hits, 0);
}

TEST_F(Qwen3EngineTest, BatchedGreedyEqualsAloneWithPrefixCacheHits) {
    expect_alone_outputs(run(config()));
    EXPECT_GE(stats_.prefix_cache_hits, 20 * 32);  // 21 prompts share prompt 0's 32 tokens
}

TEST_F(Qwen3EngineTest, BatchedGreedyEqualsAloneWithChunkedPrefill) {
    EngineConfig c = config();
    c.max_num_batched_tokens = 24;  // prompts of up to 66 tokens run in chunks next to decodes
    c.enable_prefix_caching = false;
    expect_alone_outputs(run(c));
    // Every step computes at most 24 tokens, so the prompts took at least this many steps.
    EXPECT_GE(stats_.num_prefill_steps, (stats_.num_prompt_tokens + 23) / 24);
    EXPECT_GT(stats_.num_prompt_tokens, 64 * 24);
}

TEST_F(Qwen3EngineTest, BatchedGreedyEqualsAloneUnderPreemption) {
    EngineConfig c = config();
    c.num_blocks = 17;  // 16 usable blocks of 8 = 128 tokens for 64 x ~45 tokens
    expect_alone_outputs(run(c));
    EXPECT_GT(stats_.num_preemptions, 0);
}

}  // namespace
}  // namespace moeserve::engine
