#include "moeserve/core/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace moeserve {
namespace {

TEST(DTypeTest, NamesRoundTrip) {
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI8, DType::kU8, DType::kI32,
                    DType::kI64, DType::kBool}) {
        EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
    }
    EXPECT_FALSE(dtype_from_name("F4").has_value());
    EXPECT_EQ(dtype_size(DType::kBF16), 2u);
    EXPECT_EQ(dtype_size(DType::kI64), 8u);
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0
    EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
    // slightly above halfway rounds up
    EXPECT_EQ(f32_to_bf16(1.0040f), 0x3f81);
    EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(DTypeTest, F16MatchesKnownValues) {
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
    for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite non-negative half round-trips
        ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << h;
    }
    EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
}

TEST(DTypeTest, F8E4M3MatchesOcpSpec) {
    EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
    EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
    EXPECT_EQ(f8e4m3_to_f32(0xfe), -448.0f);
    EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
    for (int c = 0; c < 0x7f; ++c) {
        ASSERT_EQ(f32_to_f8e4m3(f8e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;
    }
    EXPECT_EQ(f32_to_f8e4m3(1000.0f), 0x7e);
}

// The nearest e4m3 code by search over every finite code, ties to the even code, saturating:
// the definition f32_to_f8e4m3's bit arithmetic must meet.
uint8_t nearest_e4m3(float f) {
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const double a = std::fabs(double(f));
    if (a >= 448.0) return static_cast<uint8_t>(sign | 0x7e);
    uint8_t best = 0;
    double best_err = a;
    for (int c = 1; c <= 0x7e; ++c) {
        const double err = std::fabs(double(f8e4m3_to_f32(static_cast<uint8_t>(c))) - a);
        if (err < best_err || (err == best_err && (c & 1) == 0)) {
            best = static_cast<uint8_t>(c);
            best_err = err;
        }
    }
    return static_cast<uint8_t>(sign | best);
}

TEST(DTypeTest, F8E4M3RoundsToNearestEvenAndSaturates) {
    std::vector<float> values = {0.0f, -0.0f, 448.0f, 463.99f, 464.0f, 479.0f, 480.0f, 1e30f, 1e-30f, 1e-45f};
    // Every code, every midpoint between neighbours (a tie) and the floats either side of each.
    for (int c = 0; c < 0x7e; ++c) {
        const float lo = f8e4m3_to_f32(static_cast<uint8_t>(c)), hi = f8e4m3_to_f32(static_cast<uint8_t>(c + 1));
        const float mid = (lo + hi) / 2;
        for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), std::nextafter(lo, 1e9f)})
            values.push_back(v);
    }
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> log2a(-14.0f, 9.5f);
    for (int i = 0; i < 200000; ++i) values.push_back(std::exp2(log2a(rng)));
    for (float v : values) {
        ASSERT_EQ(f32_to_f8e4m3(v), nearest_e4m3(v)) << v;
        ASSERT_EQ(f32_to_f8e4m3(-v), nearest_e4m3(-v)) << -v;
    }
    EXPECT_EQ(f32_to_f8e4m3(std::nanf("")), 0x7f);
}

// A KV cache row: scale = amax / 448 (the amax maps to 448), 1 for a zero row; read back within
// 2^-4 of each value (3 mantissa bits) or 2^-10 scale where the scaled value is subnormal.
TEST(DTypeTest, F8E4M3RowRoundTripsWithinItsBound) {
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int n : {1, 7, 128, 577}) {
        for (float mag : {1e-3f, 1.0f, 300.0f}) {
            std::vector<float> src(static_cast<size_t>(n));
            for (auto& x : src) x = mag * normal(rng) * (normal(rng) > 1.5f ? 1e-4f : 1.0f);
            std::vector<uint8_t> q(static_cast<size_t>(n));
            const float scale = store_f32_row_e4m3(q.data(), src.data(), n);
            float amax = 0;
            for (float x : src) amax = std::max(amax, std::fabs(x));
            EXPECT_FLOAT_EQ(scale, amax / 448.0f);
            for (int i = 0; i < n; ++i) {
                const float back = f8e4m3_to_f32(q[size_t(i)]) * scale, x = src[size_t(i)];
                EXPECT_NE(q[size_t(i)] & 0x7f, 0x7f);  // never a NaN code
                ASSERT_LE(std::fabs(back - x), std::max(std::ldexp(std::fabs(x), -4), std::ldexp(scale, -10)) * 1.0001f)
                    << "n=" << n << " i=" << i << " x=" << x << " scale=" << scale;
            }
        }
    }
    std::vector<float> zeros(9, 0.0f);
    std::vector<uint8_t> q(9, 0xff);
    EXPECT_EQ(store_f32_row_e4m3(q.data(), zeros.data(), 9), 1.0f);
    for (uint8_t c : q) EXPECT_EQ(c, 0);
}

}  // namespace
}  // namespace moeserve
