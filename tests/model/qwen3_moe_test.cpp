// Qwen3-MoE numerics against the independent numpy reference (tests/reference/qwen3_moe_ref.py,
// float64 from the same bf16 weights): prefill, decode through the paged KV cache, chunked
// prefill, block sizes, batching of several sequences, and greedy continuations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/model_test_util.h"
#include "moeserve/core/error.h"
#include "moeserve/model/registry.h"
#include "moeserve/testing/sequence_runner.h"

namespace moeserve::model {
namespace {

using moeserve::testing::SequenceRunner;
using testutil::argmax;
using testutil::max_abs;
using testutil::max_abs_diff;
using testutil::read_f32;

const std::filesystem::path kModelDir = MOESERVE_QWEN3_TINY_DIR;

// --dtype `dtype` (float32 by default) at the tests' max_model_len.
LoadOptions f32_options(const char* dtype = "float32") {
    LoadOptions o{.max_model_len = 256};
    o.dtype = dtype;
    return o;
}

std::vector<int32_t> prompt_ids() { return testutil::parse_ids(MOESERVE_QWEN3_PROMPT); }

class Qwen3MoeTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        pool_ = new ThreadPool(2);
        model_ = load_model(kModelDir, *pool_, LoadOptions{.max_model_len = 256}).release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete pool_;
    }
    static int64_t vocab() { return model_->info().vocab_size; }

    static ThreadPool* pool_;
    static Model* model_;
};
ThreadPool* Qwen3MoeTest::pool_ = nullptr;
Model* Qwen3MoeTest::model_ = nullptr;

// Logits are O(1-10); float32 activations vs the float64 oracle differ by rounding only.
// The bound is relative to the largest reference logit.
constexpr float kRelTolerance = 2e-5f;  // measured: 7e-7 (3.8e-6 of 5.46)

TEST_F(Qwen3MoeTest, FullPrefillMatchesReference) {
    const auto ids = prompt_ids();
    const auto ref = read_f32(kModelDir / "reference_logits.f32");
    ASSERT_EQ(ref.size(), ids.size() * static_cast<size_t>(vocab()));
    SequenceRunner runner(*model_, 256, 16);
    const auto logits = runner.append(ids, 0, /*all_logits=*/true);
    const float diff = max_abs_diff(logits, ref);
    std::printf("prefill: max |logit - reference| = %.3g, max |reference| = %.3g\n", diff, max_abs(ref));
    EXPECT_LE(diff, kRelTolerance * max_abs(ref)) << "max |ref| " << max_abs(ref);
    for (size_t t = 0; t < ids.size(); ++t) {
        EXPECT_EQ(argmax(&logits[t * static_cast<size_t>(vocab())], vocab()),
                  argmax(&ref[t * static_cast<size_t>(vocab())], vocab()))
            << "position " << t;
    }
}

TEST_F(Qwen3MoeTest, TokenByTokenDecodeMatchesReference) {
    const auto ids = prompt_ids();
    const auto ref = read_f32(kModelDir / "reference_logits.f32");
    SequenceRunner runner(*model_, 256, 16);
    std::vector<float> logits;
    for (int32_t id : ids) {
        const auto row = runner.append(std::span<const int32_t>(&id, 1));
        logits.insert(logits.end(), row.begin(), row.end());
    }
    EXPECT_LE(max_abs_diff(logits, ref), kRelTolerance * max_abs(ref));
}

TEST_F(Qwen3MoeTest, ChunkedPrefillEqualsOnePrefill) {
    const auto ids = prompt_ids();
    SequenceRunner whole(*model_, 256, 16);
    const auto expected = whole.append(ids, 0, true);
    for (int64_t chunk : {1, 4, 7}) {
        SequenceRunner chunked(*model_, 256, 16);
        const auto got = chunked.append(ids, chunk, true);
        EXPECT_LE(max_abs_diff(got, expected), 1e-4f * max_abs(expected)) << "chunk " << chunk;
    }
}

TEST_F(Qwen3MoeTest, BlockSizeDoesNotChangeLogits) {
    const auto ids = prompt_ids();
    SequenceRunner base(*model_, 256, 16);
    const auto expected = base.append(ids, 5, true);
    for (int64_t block_size : {1, 3, 128}) {
        SequenceRunner runner(*model_, 256, block_size);
        const auto got = runner.append(ids, 5, true);
        EXPECT_LE(max_abs_diff(got, expected), 1e-5f * max_abs(expected)) << "block size " << block_size;
    }
}

TEST_F(Qwen3MoeTest, GreedyContinuationMatchesReference) {
    std::ifstream in(kModelDir / "reference_greedy.json");
    ASSERT_TRUE(in);
    const auto ref = nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
    const auto ids = prompt_ids();
    ASSERT_GE(ref.size(), static_cast<size_t>(MOESERVE_QWEN3_GREEDY_STEPS));
    SequenceRunner runner(*model_, 256, 16);
    std::vector<float> logits = runner.append(ids);
    std::vector<int32_t> generated;
    for (int step = 0; step < MOESERVE_QWEN3_GREEDY_STEPS; ++step) {
        const int32_t next = argmax(logits.data(), vocab());
        generated.push_back(next);
        logits = runner.append(std::span<const int32_t>(&next, 1));
    }
    // The reference writes the continuation only (or the prompt + continuation).
    std::vector<int32_t> ref_tail(ref.end() - MOESERVE_QWEN3_GREEDY_STEPS, ref.end());
    EXPECT_EQ(generated, ref_tail);
}

// --dtype float32: the same bf16 weights widened at load run the f32 kernels. Widening is exact,
// so the logits equal the bf16 path's up to f32 summation order, stay within the reference
// bound, and the greedy continuation is the reference's.
TEST_F(Qwen3MoeTest, F32WeightsMatchBf16PathAndReference) {
    auto f32 = load_model(kModelDir, *pool_, f32_options());
    const auto ids = prompt_ids();
    const auto ref = read_f32(kModelDir / "reference_logits.f32");
    SequenceRunner bf16_runner(*model_, 256, 16), f32_runner(*f32, 256, 16);
    const auto bf16_logits = bf16_runner.append(ids, 0, true);
    const auto f32_logits = f32_runner.append(ids, 0, true);
    const float vs_bf16 = max_abs_diff(f32_logits, bf16_logits), vs_ref = max_abs_diff(f32_logits, ref);
    std::printf("f32 weights: max |logit - bf16 path| = %.3g, max |logit - reference| = %.3g\n", vs_bf16, vs_ref);
    EXPECT_LE(vs_bf16, 1e-5f * max_abs(ref));
    EXPECT_LE(vs_ref, kRelTolerance * max_abs(ref));
    std::ifstream in(kModelDir / "reference_greedy.json");
    ASSERT_TRUE(in);
    const auto greedy = nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
    SequenceRunner runner(*f32, 256, 16);
    std::vector<float> logits = runner.append(ids);
    std::vector<int32_t> generated;
    for (int step = 0; step < MOESERVE_QWEN3_GREEDY_STEPS; ++step) {
        const int32_t next = argmax(logits.data(), vocab());
        generated.push_back(next);
        logits = runner.append(std::span<const int32_t>(&next, 1));
    }
    EXPECT_EQ(generated, std::vector<int32_t>(greedy.end() - MOESERVE_QWEN3_GREEDY_STEPS, greedy.end()));
}

TEST(Qwen3MoeDtypeTest, HalfIsRefusedWithTheAcceptedValues) {
    ThreadPool pool(1);
    for (const char* bad : {"half", "float16", "int8"}) {
        try {
            load_model(kModelDir, pool, f32_options(bad));
            ADD_FAILURE() << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
        }
    }
}

// Two sequences in one forward (one prefilling a chunk, one decoding) give the same logits as
// each run alone: the batch boundary, block tables and slot mapping are honoured.
TEST_F(Qwen3MoeTest, MixedBatchEqualsSeparateRuns) {
    const auto ids = prompt_ids();
    const int64_t bs = 4;
    auto kv = model_->create_kv_cache(32, bs);
    // seq A: blocks 5,2,9 (out of order); seq B: blocks 1,7,3,4,6
    const std::vector<int32_t> table_a = {5, 2, 9, 0, 0, 0};
    const std::vector<int32_t> table_b = {1, 7, 3, 4, 6, 0};
    const auto slot = [&](const std::vector<int32_t>& table, int64_t pos) {
        return table[static_cast<size_t>(pos / bs)] * bs + pos % bs;
    };
    // Step 1: B prefills its first 10 tokens alone.
    ForwardBatch first;
    for (int32_t p = 0; p < 10; ++p) {
        first.token_ids.push_back(ids[static_cast<size_t>(p)]);
        first.positions.push_back(p);
        first.slot_mapping.push_back(slot(table_b, p));
    }
    first.query_start = {0, 10};
    first.seq_lens = {10};
    first.block_tables = table_b;
    first.max_blocks_per_seq = 6;
    first.logits_rows = {9};
    model_->forward(first, *kv);
    // Step 2: A prefills 7 tokens while B decodes its 11th.
    ForwardBatch mixed;
    for (int32_t p = 0; p < 7; ++p) {
        mixed.token_ids.push_back(ids[static_cast<size_t>(p + 3)]);
        mixed.positions.push_back(p);
        mixed.slot_mapping.push_back(slot(table_a, p));
    }
    mixed.token_ids.push_back(ids[10]);
    mixed.positions.push_back(10);
    mixed.slot_mapping.push_back(slot(table_b, 10));
    mixed.query_start = {0, 7, 8};
    mixed.seq_lens = {7, 11};
    mixed.block_tables = table_a;
    mixed.block_tables.insert(mixed.block_tables.end(), table_b.begin(), table_b.end());
    mixed.max_blocks_per_seq = 6;
    mixed.logits_rows = {6, 7};
    const TensorView out = model_->forward(mixed, *kv);
    std::vector<float> got(out.as<float>(), out.as<float>() + out.numel());

    SequenceRunner alone_a(*model_, 64, 16);
    auto expected = alone_a.append(std::span<const int32_t>(ids.data() + 3, 7));
    SequenceRunner alone_b(*model_, 64, 16);
    const auto b = alone_b.append(std::span<const int32_t>(ids.data(), 11));
    expected.insert(expected.end(), b.begin(), b.end());
    EXPECT_LE(max_abs_diff(got, expected), 1e-4f * max_abs(expected));
}

TEST(ModelRegistryTest, ErrorsNameTheProblem) {
    ThreadPool pool(1);
    try {
        load_model("/nonexistent/model", pool);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kNotFound);
        EXPECT_NE(std::string(e.what()).find("/nonexistent/model"), std::string::npos);
    }
    const auto dir = std::filesystem::temp_directory_path() / "moeserve_registry_test";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << R"({"model_type": "llama"})";
    try {
        load_model(dir, pool);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
        EXPECT_NE(std::string(e.what()).find("qwen3_moe"), std::string::npos) << e.what();
    }
    std::ofstream(dir / "config.json")
        << R"({"model_type": "qwen3_moe", "hidden_size": 768, "num_attention_heads": 6, "num_key_value_heads": 4})";
    try {
        load_model(dir, pool);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidModel);
        EXPECT_NE(std::string(e.what()).find("num_key_value_heads"), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moeserve::model
