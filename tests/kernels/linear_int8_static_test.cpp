// linear_int8_static (ModelSlim static W8A8, golden-stick A8W8's per-channel divisors) vs its
// scalar reference on every ISA level, bit-exact:
// odd shapes, k not a multiple of 32, activations that quantize to -128 (the AVX2 sign trick
// cannot take them), negative and positive zero points, an int32 bias, 1-3 threads; and the
// activation rounding rule itself (two f32 roundings, ties to even, saturation).
#include "moeserve/kernels/cpu/linear_int8_static.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

// per_channel: golden-stick's per-input-channel divisor (x / x_div[p]) instead of x * x_mul
void check_shape(int64_t m, int64_t k, int64_t n, int threads, float zero, uint32_t seed, bool per_channel = false) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " k=" << k << " n=" << n << " threads=" << threads
                                    << " zero=" << zero << " per_channel=" << per_channel);
    std::mt19937 rng(seed);
    ThreadPool pool(threads);
    test::Floats x(m * k), out(m * n), ref(m * n);
    // x * 30 + zero covers [-150 + zero, 150 + zero]: both saturation ends, -128 included
    test::fill_uniform(x.data(), m * k, rng, -5.0f, 5.0f);
    std::vector<int8_t> w(static_cast<size_t>(n * k));
    std::uniform_int_distribution<int> d(-127, 127);
    for (auto& v : w) v = static_cast<int8_t>(d(rng));
    std::vector<int32_t> bias(static_cast<size_t>(n));
    std::uniform_int_distribution<int> db(-100000, 100000);
    for (auto& b : bias) b = db(rng);
    test::Floats deq(n);
    test::fill_uniform(deq.data(), n, rng, 1e-5f, 1e-3f);
    // divisors around 1/30: the same range of quantized values as x_mul = 30
    test::Floats div(k);
    test::fill_uniform(div.data(), k, rng, 0.02f, 0.05f);
    StaticInt8Weights sw{w.data(), bias.data(), deq.data(), n, k, 30.0f, zero};
    if (per_channel) sw.x_div = div.data();
    Int8Scratch scratch;
    linear_int8_static(pool, x.data(), m, sw, out.data(), scratch);
    linear_int8_static_ref(x.data(), m, sw, ref.data());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(out[i], ref[i]) << "index " << i;
}

TEST(LinearInt8StaticTest, OddShapesMatchReferenceBitExact) {
    test::for_each_isa_and_gemv_walk([&](cpu::Isa) {
        uint32_t seed = 1;
        for (int threads : {1, 3}) {
            for (int64_t m : {1, 2, 3, 5, 9, 17, 70}) {
                for (int64_t k : {1, 7, 33, 100, 300}) {
                    for (int64_t n : {1, 7, 16, 33, 100}) {
                        check_shape(m, k, n, threads, (seed % 3 == 0) ? -7.0f : (seed % 3 == 1 ? 0.0f : 12.0f), seed,
                                    seed % 2 == 0);
                        ++seed;
                    }
                }
            }
        }
    });
}

TEST(LinearInt8StaticTest, LargeShapesMatchReferenceBitExact) {
    test::for_each_isa_and_gemv_walk([&](cpu::Isa) {
        check_shape(1, 1000, 517, 2, -3.0f, 5);
        check_shape(130, 600, 400, 3, 5.0f, 7);
        check_shape(130, 600, 400, 3, -4.0f, 8, true);
    });
}

TEST(LinearInt8StaticTest, MinusOneTwentyEightTimesNegativeWeights) {
    // every activation quantizes to -128 and every weight is -127: acc = k * 16256
    test::for_each_isa_and_gemv_walk([&](cpu::Isa) {
        const int64_t m = 2, k = 96, n = 5;
        std::vector<float> x(static_cast<size_t>(m * k), -200.0f), out(static_cast<size_t>(m * n));
        std::vector<int8_t> w(static_cast<size_t>(n * k), -127);
        std::vector<float> deq(static_cast<size_t>(n), 0.5f);
        ThreadPool pool(1);
        Int8Scratch scratch;
        linear_int8_static(pool, x.data(), m, {w.data(), nullptr, deq.data(), n, k, 1.0f, 0.0f}, out.data(), scratch);
        for (float v : out) EXPECT_EQ(v, 0.5f * float(k * 128 * 127));
    });
}

TEST(LinearInt8StaticTest, QuantizationRounding) {
    // rint(x * mul + zero): ties to even after the product is rounded to f32; saturation
    const float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 1000.0f, -1000.0f, 0.25f};
    int8_t q[8];
    quantize_rows_int8_static(x, 1, 8, 1.0f, 0.0f, q, 8);
    const int8_t expect[] = {0, 2, 2, 0, -2, 127, -128, 0};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(q[i], expect[i]) << i;
    quantize_rows_int8_static(x, 1, 8, 2.0f, 3.0f, q, 8);  // 1+3, 3+3, 5+3, -1+3, -3+3, sat, sat, 0.5+3
    const int8_t expect2[] = {4, 6, 8, 2, 0, 127, -128, 4};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(q[i], expect2[i]) << i;
    // per-channel divisors (golden-stick): x / d rounded to f32, then + zero, ties to even
    const float d[] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    quantize_rows_int8_static_div(x, 1, 8, d, 3.0f, q, 8);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(q[i], expect2[i]) << i;
    // 1 / 3 is not a power of two: the quotient is rounded, not x * f32(1 / 3)
    const float x3[] = {1.5f, -4.5f, 7.5f}, d3[] = {3.0f, 3.0f, 1.0f};
    quantize_rows_int8_static_div(x3, 1, 3, d3, 0.0f, q, 4);
    EXPECT_EQ(q[0], 0);   // 0.5 -> 0 (tie to even)
    EXPECT_EQ(q[1], -2);  // -1.5 -> -2
    EXPECT_EQ(q[2], 8);   // 7.5 -> 8
    EXPECT_EQ(q[3], 0);   // padding column
}

}  // namespace
}  // namespace moeserve::kernels::cpu
