// int4 (W4A16) checkpoints on the tiny models: compressed-tensors pack-quantized (symmetric,
// asymmetric, actorder group; groups of 32), AutoAWQ and GPTQ (also with desc_act) written by
// make-model; logits against the float64 numpy reference run on the weights the reference
// dequantizes itself (tests/reference/safetensors_np.py, from each format's definition).
// The same checkpoints run as W4A8 (--quantization w4a8) against a reference with per-token int8
// activations. Load-time --quantization w4a16 / w4a8 of a bf16 checkpoint against bf16 (reported,
// loosely bounded).
// Config and bad-file errors are one line naming the field or the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <utility>

#include "model/model_test_util.h"
#include "moeserve/core/error.h"
#include "moeserve/io/safetensors_writer.h"
#include "moeserve/model/formats/int4_config.h"
#include "moeserve/model/formats/int4_weights.h"
#include "moeserve/model/registry.h"
#include "test_support.h"

namespace moeserve::model {
namespace {

using testutil::decode_each;
using testutil::max_abs;
using testutil::max_abs_diff;
using testutil::parse_ids;
using testutil::prefill;
using testutil::read_f32;

// The engine's weights are the reference's dequantized weights exactly (scale * (q - zero): a
// bf16 / f16 scale times an integer of at most 5 bits is exact in f32) and the activations stay
// f32, so the logits differ from the float64 reference only by f32 arithmetic, as the bf16 runs
// do (their bound: 2e-5 of the largest logit).
constexpr float kInt4RelTolerance = 2e-5f;

class Int4ModelTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() { pool_ = new ThreadPool(2); }
    static void TearDownTestSuite() {
        delete pool_;
        pool_ = nullptr;
    }
    static std::unique_ptr<Model> open(const std::filesystem::path& dir, const std::string& quantization = "") {
        return load_model(dir, *pool_, LoadOptions{.max_model_len = 256, .quantization = quantization});
    }
    static void check_against_reference(const char* dir, const char* prompt, const char* what) {
        auto m = open(dir);
        const auto ids = parse_ids(prompt);
        const auto ref = read_f32(std::filesystem::path(dir) / "reference_logits.f32");
        ASSERT_EQ(ref.size(), ids.size() * static_cast<size_t>(m->info().vocab_size));
        const auto logits = prefill(*m, ids);
        const auto dec = decode_each(*m, ids);
        const float diff = max_abs_diff(logits, ref), ddiff = max_abs_diff(dec, ref);
        std::printf("%s: prefill max |logit - reference| = %.3g, decode %.3g, max |reference| = %.3g\n", what, diff,
                    ddiff, max_abs(ref));
        EXPECT_LE(diff, kInt4RelTolerance * max_abs(ref));
        EXPECT_LE(ddiff, kInt4RelTolerance * max_abs(ref));
    }
    static ThreadPool* pool_;
};
ThreadPool* Int4ModelTest::pool_ = nullptr;

TEST_F(Int4ModelTest, Qwen3CompressedTensorsSymmetricMatchesReference) {
    check_against_reference(MOESERVE_QWEN3_W4A16_DIR, MOESERVE_QWEN3_PROMPT, "qwen3_moe w4a16 (symmetric)");
}

TEST_F(Int4ModelTest, DeepseekV3CompressedTensorsAsymmetricMatchesReference) {
    check_against_reference(MOESERVE_DSV3_W4A16_ASYM_DIR, MOESERVE_DSV3_PROMPT, "deepseek_v3 w4a16 (asymmetric)");
}

TEST_F(Int4ModelTest, Qwen3AwqMatchesReference) {
    check_against_reference(MOESERVE_QWEN3_AWQ_DIR, MOESERVE_QWEN3_PROMPT, "qwen3_moe awq");
}

TEST_F(Int4ModelTest, DeepseekV3GptqMatchesReference) {
    check_against_reference(MOESERVE_DSV3_GPTQ_DIR, MOESERVE_DSV3_PROMPT, "deepseek_v3 gptq");
}

TEST_F(Int4ModelTest, Qwen3GptqActOrderMatchesReference) {
    // desc_act: g_idx is a shuffled activation order; the reference uses g_idx as it is, the engine
    // stores the columns in group order and gathers the activations to match
    check_against_reference(MOESERVE_QWEN3_GPTQ_ACT_DIR, MOESERVE_QWEN3_PROMPT, "qwen3_moe gptq desc_act");
}

TEST_F(Int4ModelTest, DeepseekV3CompressedTensorsActOrderMatchesReference) {
    // actorder "group": weight_g_idx maps each input column to its group, the columns stored in
    // input order (make-model --quantization w4a16-act: a shuffled order)
    check_against_reference(MOESERVE_DSV3_W4A16_ACT_DIR, MOESERVE_DSV3_PROMPT, "deepseek_v3 w4a16 actorder group");
}

// W4A8 against the reference that quantizes the activations per token at every int4 linear
// (--act-quant): W8A8's bound (1e-4 of the largest logit: an activation on an int8 rounding
// boundary may round to the neighbouring step in f32 and in float64), with ascend_formats_test's
// allowance of one row within 1 % that keeps its argmax (the tiny DeepSeek's routing amplifies
// one such flip).
void check_w4a8(Model& m, const char* dir, const char* prompt, const char* reference) {
    SCOPED_TRACE(dir);
    std::printf("%s: %s\n", dir, m.info().quantization.c_str());
    EXPECT_NE(m.info().quantization.find("running W4A8 int4"), std::string::npos);
    const auto ids = parse_ids(prompt);
    const auto ref = read_f32(std::filesystem::path(dir) / reference);
    const auto vocab = static_cast<size_t>(m.info().vocab_size);
    ASSERT_EQ(ref.size(), ids.size() * vocab);
    const float bound = 1e-4f * max_abs(ref);
    float diff = 0.0f, ddiff = 0.0f;
    const auto logits = prefill(m, ids), dec = decode_each(m, ids);
    const int bad = testutil::rows_beyond(logits, ref, vocab, bound, &diff, "prefill");
    const int dbad = testutil::rows_beyond(dec, ref, vocab, bound, &ddiff, "decode");
    std::printf("w4a8: prefill max |logit - reference| = %.3g, decode %.3g, max |reference| = %.3g\n", diff, ddiff,
                max_abs(ref));
    EXPECT_LE(bad + dbad, 1);
    EXPECT_LE(std::max(diff, ddiff), 1e-2f * max_abs(ref));
    for (size_t t = 0; t < ids.size(); ++t) {
        EXPECT_EQ(testutil::argmax(&logits[t * vocab], int64_t(vocab)),
                  testutil::argmax(&ref[t * vocab], int64_t(vocab)))
            << t;
    }
}

// --quantization w4a8 on the W4A16 checkpoints: the same weights, int8 activations.
TEST_F(Int4ModelTest, RunAsW4A8MatchesActivationQuantizedReference) {
    for (const auto& [dir, prompt] : {std::pair{MOESERVE_QWEN3_W4A16_DIR, MOESERVE_QWEN3_PROMPT},
                                      std::pair{MOESERVE_DSV3_W4A16_ASYM_DIR, MOESERVE_DSV3_PROMPT}}) {
        check_w4a8(*open(dir, "w4a8"), dir, prompt, "reference_logits_a8.f32");
    }
}

// compressed-tensors W4A8 (8-bit per-token input_activations) runs W4A8 as stored; w4a16 asks
// for f32 activations instead.
TEST_F(Int4ModelTest, Qwen3CompressedTensorsW4A8MatchesReference) {
    check_w4a8(*open(MOESERVE_QWEN3_W4A8_DIR), MOESERVE_QWEN3_W4A8_DIR, MOESERVE_QWEN3_PROMPT, "reference_logits.f32");
    EXPECT_NE(open(MOESERVE_QWEN3_W4A8_DIR, "w4a16")->info().quantization.find("running W4A16"), std::string::npos);
}

TEST_F(Int4ModelTest, LoadTimeW4A16CloseToBf16AndSmaller) {
    // Only a sanity bound (4-bit weights move the tiny random models' logits a lot, and DeepSeek's
    // routing flips, see docs/quantization.md); the exactness is the checkpoint tests' business.
    for (const auto& [dir, prompt] : {std::pair{MOESERVE_QWEN3_TINY_DIR, MOESERVE_QWEN3_PROMPT},
                                      std::pair{MOESERVE_DSV3_TINY_DIR, MOESERVE_DSV3_PROMPT}}) {
        auto bf16 = open(dir);
        auto w4 = open(dir, "w4a16");
        auto w4a8 = open(dir, "w4a8");
        auto w8 = open(dir, "w8a8");
        const auto ids = parse_ids(prompt);
        const auto lb = prefill(*bf16, ids), l4 = prefill(*w4, ids), l48 = prefill(*w4a8, ids);
        std::printf(
            "%s w4a16 at load vs bf16: max |logit diff| %.3g (max |logit| %.3g); weight bytes %lld (w8a8 %lld, "
            "bf16 %lld)\n",
            dir, max_abs_diff(l4, lb), max_abs(lb), static_cast<long long>(w4->info().rank_weight_bytes),
            static_cast<long long>(w8->info().rank_weight_bytes),
            static_cast<long long>(bf16->info().rank_weight_bytes));
        std::printf("%s w4a8 at load vs bf16: max |logit diff| %.3g\n", dir, max_abs_diff(l48, lb));
        EXPECT_LE(max_abs_diff(l4, lb), max_abs(lb));
        EXPECT_LE(max_abs_diff(l48, lb), max_abs(lb));
        EXPECT_LT(w4->info().rank_weight_bytes, w8->info().rank_weight_bytes);
        EXPECT_EQ(w4a8->info().rank_weight_bytes, w4->info().rank_weight_bytes);
    }
}

TEST_F(Int4ModelTest, CheckpointDequantizedToBf16WithNone) {
    // --quantization none widens the int4 weights to bf16: close to the reference at bf16's rounding
    auto m = open(MOESERVE_QWEN3_W4A16_DIR, "none");
    const auto ref = read_f32(std::filesystem::path(MOESERVE_QWEN3_W4A16_DIR) / "reference_logits.f32");
    const auto logits = prefill(*m, parse_ids(MOESERVE_QWEN3_PROMPT));
    std::printf("qwen3_moe w4a16 -> bf16: max |logit - reference| = %.3g\n", max_abs_diff(logits, ref));
    EXPECT_LE(max_abs_diff(logits, ref), 0.05f * max_abs(ref));
}

// --- config.json and bad files ------------------------------------------------------------------

nlohmann::json ct_config(int bits, const nlohmann::json& group_size) {
    return {{"quant_method", "compressed-tensors"},
            {"format", "pack-quantized"},
            {"config_groups",
             {{"group_0",
               {{"weights",
                 {{"num_bits", bits},
                  {"type", "int"},
                  {"symmetric", true},
                  {"strategy", "group"},
                  {"group_size", group_size}}}}}}}};
}

using test::error_of;

TEST(Int4ConfigTest, ParsesTheThreeFormats) {
    std::vector<std::string> ignore;
    auto ct = parse_int4_config(ct_config(4, 64), "config.json", ignore);
    ASSERT_TRUE(ct);
    EXPECT_EQ(ct->layout, Int4Layout::kCompressedTensors);
    EXPECT_EQ(ct->group_size, 64);
    auto awq = parse_int4_config({{"quant_method", "awq"},
                                  {"bits", 4},
                                  {"group_size", 128},
                                  {"version", "gemm"},
                                  {"zero_point", true},
                                  {"modules_to_not_convert", {"mlp.gate"}}},
                                 "config.json", ignore);
    ASSERT_TRUE(awq);
    EXPECT_EQ(awq->layout, Int4Layout::kAwq);
    ASSERT_EQ(ignore.size(), 1u);  // a substring, as AutoAWQ matches it
    EXPECT_EQ(ignore[0], "re:.*mlp\\.gate.*");
    auto gptq = parse_int4_config({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", -1}, {"sym", true}},
                                  "config.json", ignore);
    ASSERT_TRUE(gptq);
    EXPECT_EQ(gptq->group_size, 0);  // per channel
    EXPECT_TRUE(gptq->gptq_zero_plus_one);
    EXPECT_FALSE(parse_int4_config({{"quant_method", "fp8"}}, "config.json", ignore));
    // compressed-tensors actorder: "group" / "dynamic" read a weight_g_idx, "weight" / "static" are
    // the plain layout
    for (const auto& [value, act_order] : {std::pair{"group", true}, std::pair{"dynamic", true},
                                           std::pair{"weight", false}, std::pair{"static", false}}) {
        nlohmann::json qc = ct_config(4, 128);
        qc["config_groups"]["group_0"]["weights"]["actorder"] = value;
        EXPECT_EQ(parse_int4_config(qc, "config.json", ignore)->desc_act, act_order) << value;
    }
}

TEST(Int4ConfigTest, RefusesWhatItDoesNotRunInOneLine) {
    std::vector<std::string> ignore;
    const std::string bits = error_of([&] { parse_int4_config(ct_config(8, 128), "config.json", ignore); });
    EXPECT_NE(bits.find("config.json"), std::string::npos) << bits;
    EXPECT_NE(bits.find("weights.num_bits is 8"), std::string::npos) << bits;
    const std::string group = error_of([&] { parse_int4_config(ct_config(4, 33), "config.json", ignore); });
    EXPECT_NE(group.find("weights.group_size is 33"), std::string::npos) << group;
    const std::string gptq_bits = error_of([&] {
        parse_int4_config({{"quant_method", "gptq"}, {"bits", 3}}, "config.json", ignore);
    });
    EXPECT_NE(gptq_bits.find("quantization_config.bits is 3"), std::string::npos) << gptq_bits;
    nlohmann::json unknown_order = ct_config(4, 128);
    unknown_order["config_groups"]["group_0"]["weights"]["actorder"] = "random";
    const std::string order = error_of([&] { parse_int4_config(unknown_order, "config.json", ignore); });
    EXPECT_NE(order.find("weights.actorder is \"random\""), std::string::npos) << order;
    nlohmann::json static_act = ct_config(4, 128);
    static_act["config_groups"]["group_0"]["input_activations"] = {
        {"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"dynamic", false}, {"strategy", "tensor"}};
    const std::string act = error_of([&] { parse_int4_config(static_act, "config.json", ignore); });
    EXPECT_NE(act.find("input_activations is {"), std::string::npos) << act;
    nlohmann::json dynamic_act = static_act;
    dynamic_act["config_groups"]["group_0"]["input_activations"]["dynamic"] = true;
    dynamic_act["config_groups"]["group_0"]["input_activations"]["strategy"] = "token";
    EXPECT_TRUE(parse_int4_config(dynamic_act, "config.json", ignore)->int8_activations);
    for (const std::string& e : {bits, group, gptq_bits, order, act}) EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

class Int4BadFileTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() / ("moeserve_int4_bad_" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir_);
        quant_.checkpoint = CheckpointQuant::kInt4;
        quant_.int4 = true;
        quant_.int4_config = Int4Config{Int4Layout::kCompressedTensors, 32, true, true, false, false};
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }
    // Writes m.weight_packed [rows, words], and m.weight_scale [rows, groups] when with_scale.
    std::unique_ptr<io::WeightSource> write(int64_t rows, int64_t words, bool with_scale, int64_t groups) {
        io::SafetensorsWriter w;
        std::vector<int32_t> packed(static_cast<size_t>(rows * words), 0x11111111);
        w.add("m.weight_packed", DType::kI32, {rows, words}, packed.data());
        if (with_scale) {
            std::vector<float> s(static_cast<size_t>(rows * groups), 0.5f);
            w.add("m.weight_scale", DType::kF32, {rows, groups}, s.data());
        }
        w.write(dir_ / "model.safetensors");
        return io::WeightSource::open(dir_);
    }
    std::filesystem::path dir_;
    Quantization quant_;
};

TEST_F(Int4BadFileTest, GoodFileLoads) {
    const auto w = write(4, 8, true, 2);
    const Int4Matrix m = load_int4_matrix(*w, "m", 4, 64, quant_);
    const Tensor f = dequantize_int4(m);
    EXPECT_EQ(f.as<float>()[0], 0.5f * (1 - 8));  // code 1, symmetric zero 8
}

TEST_F(Int4BadFileTest, WrongPackedShapeNamesTheTensor) {
    const auto w = write(4, 7, true, 2);
    const std::string e = error_of([&] { load_int4_matrix(*w, "m", 4, 64, quant_); });
    EXPECT_NE(e.find("m.weight_packed"), std::string::npos) << e;
    EXPECT_NE(e.find("[4, 8]"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST_F(Int4BadFileTest, MissingScaleNamesTheTensor) {
    const auto w = write(4, 8, false, 2);
    const std::string e = error_of([&] { load_int4_matrix(*w, "m", 4, 64, quant_); });
    EXPECT_NE(e.find("m.weight_scale"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST_F(Int4BadFileTest, WrongScaleShapeNamesTheTensor) {
    const auto w = write(4, 8, true, 3);
    const std::string e = error_of([&] { load_int4_matrix(*w, "m", 4, 64, quant_); });
    EXPECT_NE(e.find("m.weight_scale"), std::string::npos) << e;
    EXPECT_NE(e.find("[4, 2]"), std::string::npos) << e;
}

TEST_F(Int4BadFileTest, MissingZeroPointNamesTheTensor) {
    const auto w = write(4, 8, true, 2);
    quant_.int4_config.symmetric = false;
    const std::string e = error_of([&] { load_int4_matrix(*w, "m", 4, 64, quant_); });
    EXPECT_NE(e.find("m.weight_zero_point"), std::string::npos) << e;
}

TEST(Int4QuantizeTest, RoundTripsWithinAStep) {
    // symmetric: half a step; asymmetric: the rounded zero point shifts the grid by up to half a
    // step, so the group's maximum may be clamped: one step
    std::vector<float> w(3 * 96);
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * float(i)) * (1.0f + float(i % 7));
    for (const bool symmetric : {true, false}) {
        const Int4Matrix m = quantize_int4(w.data(), 3, 96, 32, symmetric);
        const Tensor f = dequantize_int4(m);
        for (int64_t j = 0; j < 3; ++j) {
            for (int64_t p = 0; p < 96; ++p) {
                const float step = m.scale.as<float>()[j * 3 + p / 32];
                const float bound = (symmetric ? 0.5f : 1.0f) * step * (1 + 1e-5f);
                EXPECT_LE(std::fabs(f.as<float>()[j * 96 + p] - w[size_t(j * 96 + p)]), bound)
                    << "symmetric " << symmetric << " j " << j << " p " << p;
            }
        }
    }
}

}  // namespace
}  // namespace moeserve::model

namespace moeserve::model {
namespace {

TEST(Int4ShardTest, SlicesOnGroupBoundariesAndRefusesTheRest) {
    std::vector<float> w(4 * 128, 0.25f);
    const Int4Matrix m = quantize_int4(w.data(), 4, 128, 32, true);
    const Int4Matrix half = int4_rectangle(m, 2, 2, 64, 64, "t.weight");  // rows 2-3, groups 2-3
    EXPECT_EQ(half.rows(), 2);
    EXPECT_EQ(half.cols(), 64);
    EXPECT_EQ(half.scale.dim(1), 2);
    const std::string inside = error_of([&] { int4_rectangle(m, 0, 4, 48, 64, "t.weight"); });
    EXPECT_NE(inside.find("'t.weight'"), std::string::npos) << inside;
    EXPECT_NE(inside.find("groups of 32"), std::string::npos) << inside;
    Int4Matrix act = quantize_int4(w.data(), 4, 128, 32, true);
    act.perm = Tensor(DType::kI32, {128});
    for (int32_t i = 0; i < 128; ++i) act.perm.as<int32_t>()[i] = 127 - i;
    EXPECT_EQ(int4_rectangle(act, 0, 2, 0, 128, "a.weight").perm.numel(), 128);  // a row slice keeps the order
}

// A random act order over 4 groups of 64: every group holds inputs from every TP slice.
Int4Matrix random_act_order_matrix(int64_t rows, int64_t cols, int64_t group_size, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (float& v : w) v = d(rng);
    Int4Matrix m = quantize_int4(w.data(), rows, cols, group_size, false);
    std::vector<int32_t> order(static_cast<size_t>(cols));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    m.perm = Tensor(DType::kI32, {cols});
    std::copy(order.begin(), order.end(), m.perm.as<int32_t>());
    return m;
}

TEST(Int4ShardTest, ActOrderColumnSlicesHoldTheSameWeightsInPaddedGroups) {
    const Int4Matrix m = random_act_order_matrix(6, 256, 64, 11);
    const Tensor full = dequantize_int4(m);
    for (const auto& [col0, cols] : {std::pair<int64_t, int64_t>{0, 128}, {128, 128}, {64, 64}, {192, 64}}) {
        const Int4Matrix s = int4_rectangle(m, 1, 4, col0, cols, "a.weight");  // rows 1-4
        EXPECT_EQ(s.in_cols(), cols);
        EXPECT_EQ(s.cols() % s.group_size, 0);
        EXPECT_TRUE(s.group_size == 32 || s.group_size == 64) << s.group_size;
        const Tensor part = dequantize_int4(s);
        ASSERT_EQ(part.dim(1), cols);
        for (int64_t j = 0; j < 4; ++j) {
            for (int64_t c = 0; c < cols; ++c) {
                ASSERT_EQ(part.as<float>()[j * cols + c], full.as<float>()[(1 + j) * 256 + col0 + c])
                    << "slice " << col0 << " row " << j << " column " << c;
            }
        }
        // the gathered input: each kept column's input, 0 in the padding
        std::vector<float> x(static_cast<size_t>(cols)), xp(static_cast<size_t>(s.cols()));
        std::iota(x.begin(), x.end(), 1.0f);
        gather_columns(s, x.data(), 1, xp.data());
        for (int64_t i = 0; i < s.cols(); ++i) {
            const int32_t input = s.perm.as<int32_t>()[i];
            EXPECT_EQ(xp[size_t(i)], input < 0 ? 0.0f : x[size_t(input)]) << i;
        }
    }
}

TEST(Int4ShardTest, StoredColumnsNameTheirInputsAndRowsKeepTheOrder) {
    const Int4Matrix m = random_act_order_matrix(8, 256, 64, 12);
    std::vector<int32_t> inputs;
    const Int4Matrix s = int4_stored_columns(m, 128, 64, "d.weight", inputs);
    EXPECT_TRUE(s.perm.empty());
    ASSERT_EQ(inputs.size(), 64u);
    const Tensor full = dequantize_int4(m), part = dequantize_int4(s);
    for (int64_t j = 0; j < 8; ++j) {
        for (int64_t i = 0; i < 64; ++i) {
            EXPECT_EQ(part.as<float>()[j * 64 + i], full.as<float>()[j * 256 + inputs[size_t(i)]]) << j << " " << i;
        }
    }
    const std::string inside = error_of([&] { int4_stored_columns(m, 32, 64, "d.weight", inputs); });
    EXPECT_NE(inside.find("'d.weight'"), std::string::npos) << inside;
    const Int4Matrix picked = int4_rows(m, {5, 0, 7});
    const Tensor rows = dequantize_int4(picked);
    ASSERT_EQ(picked.perm.numel(), 256);
    for (int64_t i = 0; i < 256; ++i) {
        EXPECT_EQ(rows.as<float>()[i], full.as<float>()[5 * 256 + i]);
        EXPECT_EQ(rows.as<float>()[2 * 256 + i], full.as<float>()[7 * 256 + i]);
    }
}

}  // namespace
}  // namespace moeserve::model
