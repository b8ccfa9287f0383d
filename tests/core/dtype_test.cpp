#include "moeserve/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace moeserve
