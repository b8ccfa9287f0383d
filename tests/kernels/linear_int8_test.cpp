// linear_int8 vs its scalar reference (bit-exact: the int32 dot products are exact and the
// rescale is the same f32 expression), odd shapes, k not a multiple of 32, weights -128..127,
// unaligned pointers, 1-3 threads; and vs the f32 product within the quantization error.
#include "moeserve/kernels/cpu/linear_int8.h"

#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "moeserve/kernels/cpu/linear.h"

namespace moeserve::kernels::cpu {
namespace {

void check_shape(int64_t m, int64_t k, int64_t n, int threads, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " k=" << k << " n=" << n << " threads=" << threads);
    std::mt19937 rng(seed);
    ThreadPool pool(threads);
    test::Floats x(m * k), out(m * n), ref(m * n);
    test::fill_uniform(x.data(), m * k, rng, -3.0f, 3.0f);
    std::vector<int8_t> w(static_cast<size_t>(n * k + 1));
    std::uniform_int_distribution<int> d(-128, 127);
    for (auto& v : w) v = static_cast<int8_t>(d(rng));
    test::Floats ws(n);
    test::fill_uniform(ws.data(), n, rng, 0.001f, 0.02f);
    Int8Scratch scratch;
    linear_int8(pool, x.data(), m, k, w.data() + 1, ws.data(), n, out.data(), scratch);
    linear_int8_ref(x.data(), m, k, w.data() + 1, ws.data(), n, ref.data());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(out[i], ref[i]) << "index " << i;
}

TEST(LinearInt8Test, OddShapesMatchReferenceBitExact) {
    test::for_each_isa_and_gemv_walk([&](cpu::Isa) {
        uint32_t seed = 1;
        for (int threads : {1, 2, 3}) {
            for (int64_t m : {1, 2, 3, 4, 5, 9, 17, 255}) {
                for (int64_t k : {1, 7, 33, 100, 300}) {
                    for (int64_t n : {1, 7, 16, 33, 100}) check_shape(m, k, n, threads, seed++);
                }
            }
        }
    });
}

TEST(LinearInt8Test, LargeShapesMatchReferenceBitExact) {
    test::for_each_isa_and_gemv_walk([&](cpu::Isa) {
        check_shape(1, 1000, 517, 2, 5);
        check_shape(4, 2048, 256, 2, 6);
        check_shape(130, 600, 400, 3, 7);
    });
}

TEST(LinearInt8Test, ExtremeValuesDoNotSaturate) {
    test::for_each_isa_and_gemv_walk([&](cpu::Isa) {
        // x at +-absmax and w = -128 everywhere: every vpmaddubsw pair is 2 * 128 * 127.
        const int64_t m = 2, k = 96, n = 5;
        std::vector<float> x(static_cast<size_t>(m * k));
        for (int64_t p = 0; p < m * k; ++p) x[static_cast<size_t>(p)] = (p % 2) ? -1.0f : 1.0f;
        std::vector<int8_t> w(static_cast<size_t>(n * k), -128);
        std::vector<float> ws(static_cast<size_t>(n), 1.0f), out(static_cast<size_t>(m * n)),
            ref(static_cast<size_t>(m * n));
        ThreadPool pool(2);
        Int8Scratch scratch;
        linear_int8(pool, x.data(), m, k, w.data(), ws.data(), n, out.data(), scratch);
        linear_int8_ref(x.data(), m, k, w.data(), ws.data(), n, ref.data());
        for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], ref[static_cast<size_t>(i)]);
        for (auto& v : x) v = 1.0f;
        linear_int8(pool, x.data(), m, k, w.data(), ws.data(), n, out.data(), scratch);
        EXPECT_EQ(out[0], float(-128 * 127 * k) / 127.0f);
    });
}

TEST(LinearInt8Test, CloseToFloatProduct) {
    test::for_each_isa_and_gemv_walk([&](cpu::Isa) {
        // Per-channel weights and per-token activations in 8 bits: relative error of a few 1e-3.
        const int64_t m = 5, k = 512, n = 64;
        std::mt19937 rng(11);
        std::vector<float> x(static_cast<size_t>(m * k)), wf(static_cast<size_t>(n * k)), ws(static_cast<size_t>(n)),
            out(static_cast<size_t>(m * n)), ref(static_cast<size_t>(m * n));
        test::fill_uniform(x.data(), m * k, rng);
        test::fill_uniform(wf.data(), n * k, rng);
        std::vector<int8_t> w(static_cast<size_t>(n * k));
        for (int64_t j = 0; j < n; ++j) {
            float amax = 0;
            for (int64_t p = 0; p < k; ++p) amax = std::max(amax, std::fabs(wf[static_cast<size_t>(j * k + p)]));
            ws[static_cast<size_t>(j)] = amax / 127.0f;
            for (int64_t p = 0; p < k; ++p)
                w[static_cast<size_t>(j * k + p)] =
                    int8_t(std::nearbyint(wf[static_cast<size_t>(j * k + p)] / ws[static_cast<size_t>(j)]));
        }
        ThreadPool pool(1);
        Int8Scratch scratch;
        linear_int8(pool, x.data(), m, k, w.data(), ws.data(), n, out.data(), scratch);
        linear_f32_ref(x.data(), m, k, wf.data(), n, ref.data());
        test::expect_close(out.data(), ref.data(), m * n, 0.01f, "int8 vs f32");
    });
}

TEST(LinearInt8Test, ZeroRowsIsNoOp) {
    ThreadPool pool(2);
    std::vector<int8_t> w(8, 1);
    float ws[2] = {1, 1}, out = 42.0f;
    Int8Scratch scratch;
    linear_int8(pool, nullptr, 0, 4, w.data(), ws, 2, &out, scratch);
    EXPECT_EQ(out, 42.0f);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
