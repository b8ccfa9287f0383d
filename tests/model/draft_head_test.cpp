// The draft head of speculative decoding (DeepSeek's MTP layer, LoadOptions::draft_head) against
// the float64 reference (tests/reference/deepseek_v3_ref.py mtp_logits): on the trained
// deepseek-v3-kjv model of models/, whose MTP layer was trained with it, and on the tiny random
// DeepSeek-V3 with an MTP layer as bf16, W8A8 and FP8 checkpoints and an F32 GGUF (the layer
// loads in the checkpoint's precision and format). After a whole prefill, after each single-token step, and after
// prefill chunks (its own KV layer carried between steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "io/io_test_util.h"
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
// As the decoder's tests, relative to the largest reference logit: f32 activations against the
// float64 reference, and W8A8's one int8 step at a rounding boundary (w8a8_model_test.cpp).
constexpr float kRelTolerance = 2e-5f;
constexpr float kW8A8RelTolerance = 1e-4f;

struct Case {
    const char* name;
    std::string dir;        // the checkpoint
    std::string reference;  // its reference_mtp_logits.f32
    const char* prompt;
    float tolerance;
};

Case tiny(const char* precision, float tolerance) {
    const std::string dir = std::string(MOESERVE_DSV3_MTP_TINY_DIR) + precision;
    return {precision, dir, dir + "/reference_mtp_logits.f32", MOESERVE_DSV3_PROMPT, tolerance};
}

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

class DraftHeadTest : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        pool_ = std::make_unique<ThreadPool>(2);
        model_ = load_model(GetParam().dir, *pool_, LoadOptions{.max_model_len = 256, .draft_head = true});
    }

    std::vector<int32_t> prompt() const { return testutil::parse_ids(GetParam().prompt); }
    std::vector<float> reference() const { return read_f32(GetParam().reference); }
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
        std::printf("%s %s: max |draft logit - reference| = %.3g, max |reference| = %.3g\n", GetParam().name, what,
                    diff, max_abs(ref));
        EXPECT_LE(diff, GetParam().tolerance * max_abs(ref));
        const auto v = static_cast<size_t>(vocab());
        for (size_t t = 0; t < ref.size() / v; ++t) {
            EXPECT_EQ(argmax(&logits[t * v], vocab()), argmax(&ref[t * v], vocab())) << "position " << t;
        }
    }

    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<Model> model_;
};

TEST_P(DraftHeadTest, AfterAWholePrefillMatchesTheReference) {
    ASSERT_TRUE(model_->has_draft_head());
    expect_reference(drafts_in_steps(1000), "whole prefill");
}

TEST_P(DraftHeadTest, AfterEachSingleTokenStepMatchesTheReference) {
    expect_reference(drafts_in_steps(1), "token by token");
}

TEST_P(DraftHeadTest, AfterPrefillChunksMatchesTheReference) { expect_reference(drafts_in_steps(5), "chunks of 5"); }

// The draft head's K/V take one more layer of the cache.
TEST_P(DraftHeadTest, TheKvCacheHasALayerForTheDraftHead) {
    ThreadPool pool(1);
    const auto plain = load_model(GetParam().dir, pool, LoadOptions{.max_model_len = 256});
    EXPECT_FALSE(plain->has_draft_head());
    const int64_t layers = plain->info().num_hidden_layers;
    EXPECT_EQ(model_->info().kv_bytes_per_token * layers, plain->info().kv_bytes_per_token * (layers + 1));
    EXPECT_GT(model_->info().rank_weight_bytes, plain->info().rank_weight_bytes);
}

// The bf16 model as an F32 GGUF (llama.cpp's blk.N.nextn.* names): the bf16 model's reference.
Case gguf_f32() {
    Case c = tiny("bf16", kRelTolerance);
    c.name = "gguf";
    c.dir = std::string(MOESERVE_DSV3_MTP_TINY_DIR) + "gguf/model-F32.gguf";
    return c;
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, DraftHeadTest,
                         ::testing::Values(Case{"kjv", MOESERVE_SOURCE_DIR "/models/deepseek-v3-kjv",
                                                MOESERVE_KJV_MTP_DIR "/reference_mtp_logits.f32",
                                                MOESERVE_KJV_MTP_PROMPT, kRelTolerance},
                                           tiny("bf16", kRelTolerance), tiny("w8a8", kW8A8RelTolerance),
                                           tiny("fp8", kRelTolerance), gguf_f32()),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// A checkpoint without an MTP layer: one error naming the tensor.
TEST(DraftHeadLoadTest, ACheckpointWithoutAnMtpLayerIsRefused) {
    ThreadPool pool(1);
    io::test::expect_error(
        [&] { load_model(MOESERVE_DSV3_TINY_DIR, pool, LoadOptions{.max_model_len = 64, .draft_head = true}); },
        ErrorCode::kInvalidModel, {"model.layers.3.eh_proj.weight", "deepseek_mtp"});
}

}  // namespace
}  // namespace moeserve::model
