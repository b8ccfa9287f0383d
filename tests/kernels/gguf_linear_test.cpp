// The GGUF linear and stacked-experts ops of the CPU backend (cpu/gguf_linear.h: tiles, threads,
// per-token activation quantization) against the reference backend's (one scalar row-dot per
// pair, kernels/reference/backend.cpp), at every ISA level, for the 32-element types that run on
// q8_0 activations (MXFP4, with Q4_0 as the control), ragged shapes: token counts that are not
// multiples of the 4 x 4 tile, rows past the last whole tile, an odd number of blocks per row.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "moeserve/core/ggml_type.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/cpu/backend.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"
#include "moeserve/kernels/reference/backend.h"
#include "moeserve/kernels/weight_types.h"

namespace moeserve::kernels {
namespace {

// A [rows, cols] matrix of `type` quantized from normal floats, each row at an odd offset.
struct Matrix {
    std::vector<uint8_t> bytes;
    GgufMatrix m;
};

Matrix random_matrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    const size_t row_bytes = *ggml_nbytes(type, static_cast<uint64_t>(cols));
    const size_t stride = row_bytes + 3;
    Matrix out{std::vector<uint8_t>(1 + stride * static_cast<size_t>(rows)), {}};
    std::normal_distribution<float> normal(0.0f, 0.5f);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (float& v : row) v = normal(rng);
        cpu::quantize_gguf(type, row.data(), out.bytes.data() + 1 + stride * static_cast<size_t>(r), cols);
    }
    out.m = GgufMatrix{type, out.bytes.data() + 1, rows, cols, stride};
    return out;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = u(rng);
    return v;
}

// |got - want| within `tolerance` of the largest |want|.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tolerance) {
    float scale = 0.0f;
    for (const float w : want) scale = std::max(scale, std::fabs(w));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tolerance * scale + 1e-30f) << "element " << i;
}

class GgufLinearTest : public testing::TestWithParam<GgmlType> {};

TEST_P(GgufLinearTest, EveryIsaMatchesTheReferenceBackend) {
    const GgmlType type = GetParam();
    std::mt19937 rng(35);
    ThreadPool pool(2);
    // 40 tokens of 1024 columns: enough rows that the pool splits their quantization
    for (const int64_t tokens : {1, 3, 9, 40}) {
        for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{7, 96}, {37, 288}, {64, 1024}}) {
            SCOPED_TRACE(testing::Message() << tokens << " tokens, [" << rows << ", " << cols << "]");
            const Matrix w = random_matrix(type, rows, cols, rng);
            const std::vector<float> x = random_floats(tokens * cols, rng);
            std::vector<float> want(static_cast<size_t>(tokens * rows));
            reference::backend().ops.gguf_linear(pool, x.data(), tokens, w.m, want.data());
            test::for_each_isa([&](cpu::Isa) {
                std::vector<float> got(want.size(), NAN);
                cpu::backend().ops.gguf_linear(pool, x.data(), tokens, w.m, got.data());
                // both quantize the same activations and take the same exact integer sums per
                // block: only the f32 sums of the blocks differ in order
                expect_close(got, want, 1e-5f);
            });
        }
    }
}

TEST_P(GgufLinearTest, StackedExpertsMatchTheReferenceBackend) {
    const GgmlType type = GetParam();
    constexpr int64_t kHidden = 256, kInter = 96, kExperts = 4;  // inter: 3 blocks, an odd count
    constexpr int kTopK = 2;
    std::mt19937 rng(27);
    std::vector<Matrix> storage;
    GgufExperts e;
    e.expert_begin = 2;  // this rank holds experts 2-5; ids 0, 1 and 6 belong to others
    e.hidden = kHidden;
    e.inter = kInter;
    for (int64_t i = 0; i < kExperts; ++i) {
        storage.push_back(random_matrix(type, kInter, kHidden, rng));
        e.gate.push_back(storage.back().m);
        storage.push_back(random_matrix(type, kInter, kHidden, rng));
        e.up.push_back(storage.back().m);
        storage.push_back(random_matrix(type, kHidden, kInter, rng));
        e.down.push_back(storage.back().m);
    }
    ThreadPool pool(2);
    for (const int64_t tokens : {1, 5, 13, 80}) {  // 80: the pool splits their quantization
        SCOPED_TRACE(testing::Message() << tokens << " tokens");
        const std::vector<float> x = random_floats(tokens * kHidden, rng);
        std::vector<int32_t> ids(static_cast<size_t>(tokens * kTopK));
        std::vector<float> weights(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
            ids[i] = static_cast<int32_t>(i % 7);  // 0-6: some remote
            weights[i] = 0.25f + 0.5f * static_cast<float>(i % 3);
        }
        std::vector<float> want(static_cast<size_t>(tokens * kHidden));
        reference::backend().ops.gguf_moe_experts(pool, x.data(), tokens, ids.data(), weights.data(), kTopK, e,
                                                  want.data());
        test::for_each_isa([&](cpu::Isa) {
            std::vector<float> got(want.size(), NAN);
            cpu::backend().ops.gguf_moe_experts(pool, x.data(), tokens, ids.data(), weights.data(), kTopK, e,
                                                got.data());
            // the down projection's input (silu(gate) * up, f32 of reassociated sums) may quantize
            // one q8_0 step apart: about 1/127 of one product, far below a wrong block or expert
            expect_close(got, want, 2e-3f);
        });
    }
}

INSTANTIATE_TEST_SUITE_P(Types, GgufLinearTest, testing::Values(GgmlType::kQ4_0, GgmlType::kMXFP4),
                         [](const auto& p) { return std::string(ggml_type_name(p.param)); });

}  // namespace
}  // namespace moeserve::kernels
