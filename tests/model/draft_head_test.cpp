// The draft head of speculative decoding (DeepSeek's MTP layer, LoadOptions::draft_head) against
// the float64 reference (tests/reference/deepseek_v3_ref.py mtp_logits) on the trained
// deepseek-v3-kjv model of models/, whose MTP layer was trained with it: after a whole prefill,
// after each single-token step, and after prefill chunks (its own KV layer carried between steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "model/model_test_util.h"
#include "moeserve/core/error.h"
#include "moeserve/model/registry.h"

namespace moeserve::model {
namespace {

using testutil::argmax;
using testutil::max_abs;
using testutil::max_abs_diff;
using testutil::read_f32;

constexpr int64_t kBlockSize = 16;
constexpr int64_t kBlocks = 16;  // block 0 is the null block; the sequence uses 1..15
// As the decoder's tests: f32 activations against the float64 reference, relative to the
// largest reference logit.
constexpr float kRelTolerance = 2e-5f;

// Tokens [begin, end) of one sequence at their positions, its K/V in blocks 1, 2, ...
ForwardBatch sequence_batch(const std::vector<int32_t>& ids, int32_t begin, int32_t end) {
    ForwardBatch b;
    for (int32_t p = begin; p < end; ++p) {
        b.token_ids.push_back(ids[static_cast<size_t>(p)]);
        b.positions.push_back(p);
        b.slot_mapping.push_back((1 + p / kBlockSize) * kBlockSize + p % kBlockSize);
    }
    b.query_start = {0, end - begin};
    b.seq_lens = {end};
    b.block_tables.resize(kBlocks - 1);
    std::iota(b.block_tables.begin(), b.block_tables.end(), 1);
    b.max_blocks_per_seq = kBlocks - 1;
    return b;
}

// The draft head's batch after `step` ran positions [begin, end): each position with the token
// after it (ids[p + 1]) and its row of the step; every row gives logits.
ForwardBatch draft_batch(const std::vector<int32_t>& ids, int32_t begin, int32_t end) {
    ForwardBatch b = sequence_batch(ids, begin, end);
    for (int32_t p = begin; p < end; ++p) {
        b.token_ids[static_cast<size_t>(p - begin)] = ids[static_cast<size_t>(p + 1)];
        b.hidden_rows.push_back(p - begin);
        b.logits_rows.push_back(p - begin);
    }
    return b;
}

class DraftHeadTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        pool_ = new ThreadPool(2);
        model_ = load_model(MOESERVE_SOURCE_DIR "/models/deepseek-v3-kjv", *pool_,
                            LoadOptions{.max_model_len = 256, .draft_head = true})
                     .release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete pool_;
    }

    static std::vector<int32_t> prompt() { return testutil::parse_ids(MOESERVE_KJV_MTP_PROMPT); }
    static std::vector<float> reference() { return read_f32(MOESERVE_KJV_MTP_REFERENCE); }
    int64_t vocab() const { return model_->info().vocab_size; }

    // Runs the prompt in steps of `chunk` tokens, each followed by the draft head on the
    // positions it ran (the last position has no next token: it is left out); returns the draft
    // logits of positions 0 .. n-2.
    std::vector<float> drafts_in_steps(int32_t chunk) const {
        const auto ids = prompt();
        const auto n = static_cast<int32_t>(ids.size());
        auto kv = model_->create_kv_cache(kBlocks, kBlockSize);
        std::vector<float> logits;
        for (int32_t begin = 0; begin < n - 1; begin += chunk) {
            const int32_t end = std::min(begin + chunk, n - 1);
            ForwardBatch step = sequence_batch(ids, begin, end);
            step.logits_rows = {end - begin - 1};
            model_->forward(step, *kv);
            const TensorView out = model_->forward_draft(draft_batch(ids, begin, end), *kv);
            logits.insert(logits.end(), out.as<float>(), out.as<float>() + out.numel());
        }
        return logits;
    }

    void expect_reference(const std::vector<float>& logits, const char* what) const {
        const auto ref = reference();
        ASSERT_EQ(logits.size(), ref.size());
        const float diff = max_abs_diff(logits, ref);
        std::printf("%s: max |draft logit - reference| = %.3g, max |reference| = %.3g\n", what, diff, max_abs(ref));
        EXPECT_LE(diff, kRelTolerance * max_abs(ref));
        const auto v = static_cast<size_t>(vocab());
        for (size_t t = 0; t < ref.size() / v; ++t) {
            EXPECT_EQ(argmax(&logits[t * v], vocab()), argmax(&ref[t * v], vocab())) << "position " << t;
        }
    }

    static ThreadPool* pool_;
    static Model* model_;
};
ThreadPool* DraftHeadTest::pool_ = nullptr;
Model* DraftHeadTest::model_ = nullptr;

TEST_F(DraftHeadTest, AfterAWholePrefillMatchesTheReference) {
    ASSERT_TRUE(model_->has_draft_head());
    expect_reference(drafts_in_steps(1000), "whole prefill");
}

TEST_F(DraftHeadTest, AfterEachSingleTokenStepMatchesTheReference) {
    expect_reference(drafts_in_steps(1), "token by token");
}

TEST_F(DraftHeadTest, AfterPrefillChunksMatchesTheReference) { expect_reference(drafts_in_steps(5), "chunks of 5"); }

// The draft head's K/V take one more layer of the cache.
TEST_F(DraftHeadTest, TheKvCacheHasALayerForTheDraftHead) {
    ThreadPool pool(1);
    const auto plain =
        load_model(MOESERVE_SOURCE_DIR "/models/deepseek-v3-kjv", pool, LoadOptions{.max_model_len = 256});
    EXPECT_FALSE(plain->has_draft_head());
    const int64_t layers = plain->info().num_hidden_layers;
    EXPECT_EQ(model_->info().kv_bytes_per_token * layers, plain->info().kv_bytes_per_token * (layers + 1));
    EXPECT_GT(model_->info().rank_weight_bytes, plain->info().rank_weight_bytes);
}

// A checkpoint without an MTP layer: one error naming the tensor.
TEST(DraftHeadLoadTest, ACheckpointWithoutAnMtpLayerIsRefused) {
    ThreadPool pool(1);
    try {
        load_model(MOESERVE_DSV3_TINY_DIR, pool, LoadOptions{.max_model_len = 64, .draft_head = true});
        FAIL() << "loaded a draft head from a checkpoint without one";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidModel);
        EXPECT_NE(std::string(e.what()).find("eh_proj.weight"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace moeserve::model
