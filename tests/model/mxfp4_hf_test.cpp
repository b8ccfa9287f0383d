// gpt-oss's Hugging Face MXFP4 tensors repacked as GGUF MXFP4 rows (model/formats/mxfp4_hf.h):
// the GGUF rows, dequantized by dequantize_gguf (bit-exact with gguf-py), give the values
// transformers' convert_moe_packed_tensors gives the HF bytes (lut_e2m1[code] * 2^(scale - 127),
// torch.ldexp in f32), for every code and every e8m0 exponent; the checked form splits
// interleaved rows and names the tensor in its errors.
#include "moeserve/model/formats/mxfp4_hf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_dequant.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"

namespace moeserve::model {
namespace {

// transformers' FP4_VALUES, in code order.
constexpr float kLutE2m1[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// The HF row's values as transformers computes them: element 2 i in the low nibble of byte i.
std::vector<float> hf_values(const uint8_t* blocks, const uint8_t* scales, int64_t cols) {
    std::vector<float> v(static_cast<size_t>(cols));
    for (int64_t k = 0; k < cols; ++k) {
        const int code = (blocks[k / 2] >> (4 * (k % 2))) & 0xF;
        v[static_cast<size_t>(k)] = std::ldexp(kLutE2m1[code], scales[k / 32] - 127);
    }
    return v;
}

uint32_t bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
}

struct HfTensor {
    int64_t rows = 0;
    int64_t cols = 0;
    std::vector<uint8_t> blocks;  // [rows, cols / 32, 16]
    std::vector<uint8_t> scales;  // [rows, cols / 32]
};

// Random codes; the exponents run through 0-255 in order, so 8 rows of 1024 hold each once.
HfTensor random_tensor(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    HfTensor t{rows, cols, std::vector<uint8_t>(static_cast<size_t>(rows * cols / 2)),
               std::vector<uint8_t>(static_cast<size_t>(rows * cols / 32))};
    for (uint8_t& b : t.blocks) b = static_cast<uint8_t>(rng());
    for (size_t i = 0; i < t.scales.size(); ++i) t.scales[i] = static_cast<uint8_t>(i % 256);
    return t;
}

TEST(Mxfp4HfTest, GgufRowsDequantizeToTheHfValues) {
    const HfTensor t = random_tensor(8, 1024, 35);
    const size_t row_bytes = mxfp4_row_bytes(t.cols);
    ASSERT_EQ(row_bytes, 1024u / 32 * 17);
    std::vector<uint8_t> gguf(static_cast<size_t>(t.rows) * row_bytes);
    mxfp4_rows_from_hf("w", t.blocks, t.scales, t.cols, 0, 1, t.rows, gguf);
    std::vector<float> got(static_cast<size_t>(t.cols));
    int checked = 0;
    for (int64_t r = 0; r < t.rows; ++r) {
        kernels::cpu::dequantize_gguf(GgmlType::kMXFP4, gguf.data() + r * row_bytes, got.data(), t.cols);
        const std::vector<float> want =
            hf_values(t.blocks.data() + r * t.cols / 2, t.scales.data() + r * t.cols / 32, t.cols);
        for (int64_t k = 0; k < t.cols; ++k) {
            const float g = got[static_cast<size_t>(k)];
            const float w = want[static_cast<size_t>(k)];
            // the same number; bit for bit but for code 8, HF's -0 where GGUF's value 0 gives +0
            ASSERT_EQ(g, w) << "row " << r << " element " << k;
            if (w != 0.0f) {
                ASSERT_EQ(bits(g), bits(w)) << "row " << r << " element " << k;
            }
            ++checked;
        }
    }
    EXPECT_EQ(checked, 8 * 1024);
}

TEST(Mxfp4HfTest, RowStepSplitsInterleavedGateAndUp) {
    const HfTensor t = random_tensor(6, 64, 7);  // 3 gate rows and 3 up rows, alternating
    const size_t row_bytes = mxfp4_row_bytes(t.cols);
    for (const int64_t first : {0, 1}) {
        std::vector<uint8_t> split(3 * row_bytes);
        mxfp4_rows_from_hf("gate_up", t.blocks, t.scales, t.cols, first, 2, 3, split);
        for (int64_t r = 0; r < 3; ++r) {
            std::vector<uint8_t> one(row_bytes);
            const int64_t src = first + 2 * r;
            mxfp4_row_from_hf(t.blocks.data() + src * 32, t.scales.data() + src * 2, t.cols, one.data());
            EXPECT_EQ(std::vector<uint8_t>(split.begin() + r * row_bytes, split.begin() + (r + 1) * row_bytes), one);
        }
    }
}

TEST(Mxfp4HfTest, KnownBlockRepacks) {
    // elements 0..31 hold codes k % 16: HF byte i = code(2 i) | code(2 i + 1) << 4
    uint8_t hf[16];
    for (int i = 0; i < 16; ++i) hf[i] = static_cast<uint8_t>(((2 * i) % 16) | (((2 * i + 1) % 16) << 4));
    const uint8_t scale = 130;
    uint8_t out[17];
    mxfp4_row_from_hf(hf, &scale, 32, out);
    EXPECT_EQ(out[0], 130);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(out[1 + j], j | (((j + 16) % 16) << 4)) << j;
}

void expect_error(const std::function<void()>& fn, ErrorCode code, const std::string& part) {
    try {
        fn();
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find("'experts.down'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
}

// The writer's direction inverts the reader's: a row quantized into Hugging Face's layout and
// repacked is the GGUF row the quantizer writes directly.
TEST(Mxfp4HfTest, HfRowFromF32RepacksToTheQuantizersRow) {
    constexpr int64_t kCols = 96;
    std::mt19937 rng(35);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(kCols);
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> blocks(kCols / 2), scales(kCols / 32), repacked(mxfp4_row_bytes(kCols)),
        direct(repacked.size());
    mxfp4_hf_row_from_f32(x.data(), kCols, blocks.data(), scales.data());
    mxfp4_row_from_hf(blocks.data(), scales.data(), kCols, repacked.data());
    kernels::cpu::quantize_gguf(GgmlType::kMXFP4, x.data(), direct.data(), kCols);
    EXPECT_EQ(repacked, direct);
}

TEST(Mxfp4HfTest, BadShapesNameTheTensor) {
    const HfTensor t = random_tensor(4, 64, 1);
    std::vector<uint8_t> dst(4 * mxfp4_row_bytes(64));
    const auto run = [&](int64_t cols, size_t scale_bytes, int64_t first, int64_t step, int64_t rows,
                         size_t dst_bytes) {
        mxfp4_rows_from_hf("experts.down", t.blocks, std::span(t.scales).first(scale_bytes), cols, first, step, rows,
                           std::span(dst).first(dst_bytes));
    };
    expect_error([&] { run(48, 8, 0, 1, 4, dst.size()); }, ErrorCode::kInvalidModel, "multiple of 32");
    expect_error([&] { run(96, 8, 0, 1, 4, dst.size()); }, ErrorCode::kInvalidModel, "whole rows");
    expect_error([&] { run(64, 7, 0, 1, 4, dst.size()); }, ErrorCode::kInvalidModel, "_scales");
    expect_error([&] { run(64, 8, 1, 1, 4, dst.size()); }, ErrorCode::kInvalidArgument, "outside");
    expect_error([&] { run(64, 8, 0, 2, 3, dst.size()); }, ErrorCode::kInvalidArgument, "outside");
    expect_error([&] { run(64, 8, 0, 1, 4, dst.size() - 1); }, ErrorCode::kInvalidArgument, "destination");
    EXPECT_NO_THROW(run(64, 8, 0, 1, 0, 0));  // no rows
}

}  // namespace
}  // namespace moeserve::model
