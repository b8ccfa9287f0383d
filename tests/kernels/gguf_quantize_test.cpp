// quantize_gguf: every type's blocks dequantize (with the gguf-py-checked dequantize_gguf) back
// to the input within that type's step, zeros stay zeros, and the activation formats follow
// llama.cpp's rules (Q8_K block sums, the largest element at -127). MXFP4 must give gguf-py's
// bytes (tests/data/gguf/quant_MXFP4.bin, tools/goldens/gguf_quants.py).
#include "moeserve/kernels/cpu/gguf_quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "moeserve/core/ggml_type.h"
#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dequant.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "kernels/kernel_test_util.h"
#include "test_support.h"

namespace moeserve::kernels::cpu {
namespace {

struct Case {
    GgmlType type;
    double max_err;  // largest |x - y| allowed, as a fraction of the largest |x| of the super-block
};

std::vector<uint8_t> quantize(GgmlType type, const std::vector<float>& x) {
    std::vector<uint8_t> q(*ggml_nbytes(type, x.size()) + 1);
    quantize_gguf(type, x.data(), q.data() + 1, static_cast<int64_t>(x.size()));  // unaligned on purpose
    q.erase(q.begin());
    return q;
}

std::vector<float> round_trip(GgmlType type, const std::vector<float>& x) {
    const std::vector<uint8_t> q = quantize(type, x);
    std::vector<float> y(x.size());
    dequantize_gguf(type, q.data(), y.data(), static_cast<int64_t>(x.size()));
    return y;
}

class GgufQuantizeTest : public testing::TestWithParam<Case> {};

TEST_P(GgufQuantizeTest, RoundTripsWithinTheStep) {
    const Case c = GetParam();
    std::mt19937 rng(27);
    for (const float spread : {1.0f, 1e-3f, 300.0f}) {
        SCOPED_TRACE(spread);
        const int64_t n = 4 * kQK_K;
        std::vector<float> x(n);
        std::normal_distribution<float> normal(0.0f, spread);
        for (float& v : x) v = normal(rng);
        x[5] = 0.0f;
        for (int i = 0; i < 16; ++i) x[kQK_K + i] = spread;                              // a constant sub-block
        for (int i = 0; i < kQK_K; ++i) x[2 * kQK_K + i] = std::fabs(x[2 * kQK_K + i]);  // one-signed
        const std::vector<float> y = round_trip(c.type, x);
        for (int64_t b = 0; b < n / kQK_K; ++b) {
            float amax = 0.0f;
            for (int64_t i = b * kQK_K; i < (b + 1) * kQK_K; ++i) amax = std::max(amax, std::fabs(x[i]));
            for (int64_t i = b * kQK_K; i < (b + 1) * kQK_K; ++i) {
                ASSERT_LE(std::fabs(x[i] - y[i]), c.max_err * amax)
                    << "element " << i << ": " << x[i] << " -> " << y[i];
            }
        }
    }
}

TEST_P(GgufQuantizeTest, ZerosStayZeros) {
    const GgmlType type = GetParam().type;
    const std::vector<float> x(2 * kQK_K, 0.0f);
    for (const float v : round_trip(type, x)) EXPECT_EQ(v, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GgufQuantizeTest,
                         testing::Values(Case{GgmlType::kF32, 0.0}, Case{GgmlType::kF16, 1e-3},
                                         Case{GgmlType::kBF16, 4e-3}, Case{GgmlType::kQ8_0, 0.01},
                                         Case{GgmlType::kQ4_0, 0.135}, Case{GgmlType::kQ4_1, 0.07},
                                         Case{GgmlType::kQ5_0, 0.07}, Case{GgmlType::kQ5_1, 0.035},
                                         Case{GgmlType::kQ2_K, 0.45}, Case{GgmlType::kQ3_K, 0.3},
                                         Case{GgmlType::kQ4_K, 0.09}, Case{GgmlType::kQ5_K, 0.045},
                                         Case{GgmlType::kQ6_K, 0.035}, Case{GgmlType::kQ8_K, 0.005},
                                         // levels 8 and 12 of a step d where amax is 8-16 d
                                         Case{GgmlType::kMXFP4, 0.25}),
                         [](const auto& p) { return std::string(ggml_type_name(p.param.type)); });

TEST(GgufQuantizeGoldenTest, Mxfp4GivesGgufPysBytes) {
    const auto path = moeserve::test::data_dir() / "gguf" / "quant_MXFP4.bin";
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_TRUE(bytes.size() >= 20 && bytes.compare(0, 8, "MSGGUFQT") == 0) << path << " is missing or not a golden";
    uint32_t header[3];  // type, element count, block bytes
    std::memcpy(header, bytes.data() + 8, sizeof(header));
    ASSERT_EQ(header[0], static_cast<uint32_t>(GgmlType::kMXFP4));
    ASSERT_EQ(bytes.size(), 20 + 4ull * header[1] + header[2]);
    ASSERT_EQ(ggml_nbytes(GgmlType::kMXFP4, header[1]), header[2]);
    std::vector<float> x(header[1]);
    std::memcpy(x.data(), bytes.data() + 20, 4ull * header[1]);
    const std::vector<uint8_t> got = quantize(GgmlType::kMXFP4, x);
    const auto* want = reinterpret_cast<const uint8_t*>(bytes.data() + 20 + 4ull * header[1]);
    int mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const size_t block = i / sizeof(BlockMXFP4);
        if (got[i] != want[i] && ++mismatches <= 5) {
            float amax = 0.0f;
            for (size_t j = 32 * block; j < 32 * block + 32; ++j) amax = std::max(amax, std::fabs(x[j]));
            ADD_FAILURE() << "block " << block << " (amax " << amax << ") byte " << i % sizeof(BlockMXFP4) << ": got "
                          << int{got[i]} << ", gguf-py " << int{want[i]};
        }
    }
    EXPECT_EQ(mismatches, 0);
}

TEST(GgufQuantizeActivationsTest, Q8KMatchesLlamaCppRules) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> x(kQK_K);
    for (float& v : x) v = u(rng);
    x[17] = 3.0f;  // the largest magnitude, positive: maps to -127
    BlockQ8_K b{};
    quantize_gguf(GgmlType::kQ8_K, x.data(), &b, kQK_K);
    EXPECT_EQ(b.qs[17], -127);
    EXPECT_EQ(b.d, 1.0f / (-127.0f / 3.0f));
    for (int j = 0; j < kQK_K / 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b.qs[16 * j + i];
        EXPECT_EQ(b.bsums[j], sum);
    }
    for (int i = 0; i < kQK_K; ++i) {
        EXPECT_EQ(b.qs[i], static_cast<int8_t>(std::min(127.0f, std::nearbyint(-127.0f / 3.0f * x[i])))) << i;
    }
}

// Where magnitudes tie, llama.cpp's scan keeps the first element: its sign sets d's. Ties placed
// so that the first lies at a later position within a group of 8 than the second.
TEST(GgufQuantizeActivationsTest, Q8KTakesTheFirstOfTiedMagnitudes) {
    for (const auto& [first, second, sign] :
         {std::tuple<int, int, float>{13, 16, 1.0f}, {13, 16, -1.0f}, {200, 255, -1.0f}, {0, 7, 1.0f}}) {
        std::vector<float> x(kQK_K, 0.5f);
        x[size_t(first)] = 3.0f * sign;
        x[size_t(second)] = -3.0f * sign;
        BlockQ8_K b{};
        quantize_gguf(GgmlType::kQ8_K, x.data(), &b, kQK_K);
        EXPECT_EQ(b.d, 1.0f / (-127.0f / (3.0f * sign))) << first << " " << second;
        EXPECT_EQ(b.qs[first], -127) << first;
        EXPECT_EQ(b.qs[second], 127) << second;
    }
}

TEST(GgufQuantizeActivationsTest, Q8_0RoundsHalfToEvenLikeLlamaCppX86) {
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;  // id = 1: the other elements are rounded as they are
    x[1] = 2.5f;
    x[2] = -3.5f;
    x[3] = 0.5f;
    BlockQ8_0 b{};
    quantize_gguf(GgmlType::kQ8_0, x.data(), &b, 32);
    EXPECT_EQ(b.qs[0], 127);
    EXPECT_EQ(b.qs[1], 2);
    EXPECT_EQ(b.qs[2], -4);
    EXPECT_EQ(b.qs[3], 0);
    EXPECT_EQ(load_f16(b.d), 1.0f);
}

// The vectorized activation quantizers give quantize_gguf's bytes at every level: random rows
// of several scales, ties of magnitude placed across vector boundaries, all-zero blocks, values
// that round exactly half way, one huge element, unaligned destinations.
TEST(GgufQuantizeActivationsTest, VectorizedEqualsTheReferenceAtEveryLevel) {
    std::mt19937 rng(11);
    std::vector<std::vector<float>> rows;
    for (const float scale : {1e-3f, 1.0f, 37.0f}) {
        std::normal_distribution<float> n(0.0f, scale);
        std::vector<float> x(4 * kQK_K);
        for (float& v : x) v = n(rng);
        rows.push_back(x);
    }
    std::vector<float> ties(2 * kQK_K, 0.25f);
    std::fill(ties.begin(), ties.begin() + 32, 0.0f);  // q8_0's block 0 all zero
    ties[37] = 2.0f;  // block 0: the first of the tie positive, at a later lane than the second's
    ties[42] = -2.0f;
    ties[kQK_K + 250] = -5.0f;  // block 1: the tie in the last vector
    ties[kQK_K + 255] = 5.0f;
    rows.push_back(ties);
    std::vector<float> halves(kQK_K);
    for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<float>(i % 64) - 31.5f;
    halves[40] = 127.0f;  // q8_0 block 1 and the q8_K block: id = 1, every x.5 rounds to even
    rows.push_back(halves);
    std::vector<float> huge(kQK_K, 1.0f);
    huge[100] = 3e38f;
    rows.push_back(huge);
    rows.push_back(std::vector<float>(kQK_K, 0.0f));
    for (const GgmlType act : {GgmlType::kQ8_0, GgmlType::kQ8_K}) {
        for (const std::vector<float>& x : rows) {
            const auto n = static_cast<int64_t>(x.size());
            const std::vector<uint8_t> want = quantize(act, x);
            test::for_each_isa([&](Isa) {
                std::vector<uint8_t> got(want.size() + 1);
                quantize_gguf_activations(act, x.data(), got.data() + 1, n);  // unaligned on purpose
                got.erase(got.begin());
                EXPECT_EQ(got, want) << ggml_type_name(act) << " row of " << n;
            });
        }
    }
}

}  // namespace
}  // namespace moeserve::kernels::cpu
