// linear_bf16 / linear_f32 vs their scalar references: GEMV and GEMM paths, odd shapes,
// unaligned pointers and 1-3 threads.
#include "moeserve/kernels/cpu/linear.h"

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

using test::expect_close;
using test::Floats;

// f32 accumulation in a different order than the (double) reference, on every path (the avx512
// bf16 GEMV widens the weights to f32 and uses f32 FMA too).
constexpr float kTol = 2e-6f;

// Runs fn(isa) for every ISA and both GEMV weight walks, and the avx512 levels also with the
// prefill GEMM's rounded x.
template <typename F>
void for_each_mode(F&& fn) {
    test::for_each_isa_and_gemv_walk(fn);
    test::for_each_isa([&](cpu::Isa isa) {
        if (isa < cpu::Isa::kAvx512) return;
        SCOPED_TRACE("MOESERVE_BF16_ACTIVATIONS=round");
        cpu::set_bf16_round_activations(true);
        fn(isa);
        cpu::set_bf16_round_activations(false);
    });
}

struct Shape {
    int64_t m, k, n;
};

void check_shape(const Shape& s, int threads, uint32_t seed, cpu::Isa isa) {
    std::mt19937 rng(seed);
    ThreadPool pool(threads);
    Floats x(s.m * s.k), out(s.m * s.n), ref(s.m * s.n);
    test::fill_uniform(x.data(), s.m * s.k, rng);
    // bf16 weights, starting one element past the vector start (unaligned).
    std::vector<uint16_t> wb = test::random_bf16(s.n * s.k, rng);
    linear_bf16(pool, x.data(), s.m, s.k, wb.data() + 1, s.n, out.data());
    // With MOESERVE_BF16_ACTIVATIONS=round the avx512 GEMM (m > 8) rounds x to bf16 once (see
    // matmul_tile_avx512.cpp): its reference takes the same rounded x, so the check stays as tight.
    Floats xr(s.m * s.k);
    const bool rounds_x = isa >= cpu::Isa::kAvx512 && s.m > 8 && cpu::bf16_round_activations();
    for (int64_t i = 0; i < s.m * s.k; ++i) xr[i] = rounds_x ? bf16_to_f32(f32_to_bf16(x[i])) : x[i];
    linear_bf16_ref(xr.data(), s.m, s.k, wb.data() + 1, s.n, ref.data());
    expect_close(out.data(), ref.data(), s.m * s.n, kTol * float(s.k), "bf16");

    Floats wf(s.n * s.k);
    test::fill_uniform(wf.data(), s.n * s.k, rng);
    linear_f32(pool, x.data(), s.m, s.k, wf.data(), s.n, out.data());
    linear_f32_ref(x.data(), s.m, s.k, wf.data(), s.n, ref.data());
    expect_close(out.data(), ref.data(), s.m * s.n, kTol * float(s.k), "f32");
}

TEST(LinearTest, OddShapesMatchReference) {
    for_each_mode([&](cpu::Isa isa) {
        uint32_t seed = 1;
        for (int threads : {1, 2, 3}) {
            for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17, 255}) {
                for (int64_t k : {1, 7, 33, 100, 300}) {
                    for (int64_t n : {1, 7, 16, 33, 100}) {
                        SCOPED_TRACE(testing::Message()
                                     << "m=" << m << " k=" << k << " n=" << n << " threads=" << threads);
                        check_shape({m, k, n}, threads, seed++, isa);
                    }
                }
            }
        }
    });
}

TEST(LinearTest, LargeShapesMatchReference) {
    for_each_mode([&](cpu::Isa isa) {
        // Qwen3-30B-A3B-like slices: o_proj [1024, 2048] at decode and prefill, k across blocks.
        for (Shape s : {Shape{1, 1000, 517}, Shape{4, 2048, 256}, Shape{8, 1024, 300}, Shape{64, 1000, 200},
                        Shape{130, 600, 400}}) {
            SCOPED_TRACE(testing::Message() << "m=" << s.m << " k=" << s.k << " n=" << s.n);
            check_shape(s, 2, 99, isa);
        }
    });
}

TEST(LinearTest, LongRowsMatchReference) {
    // From k = 2048 the avx512 GEMV reads weight rows in blocks of 4 (matmul_tile_avx512.cpp):
    // row counts that leave 1-3 rows over, k around the switch and off the 32-element vector,
    // 1-8 rows of x, one and two threads.
    for_each_mode([&](cpu::Isa isa) {
        uint32_t seed = 500;
        for (int64_t m : {1, 2, 3, 4, 5, 8}) {
            for (int64_t k : {2047, 2048, 2049, 2111, 7181}) {
                for (int64_t n : {1, 3, 6, 37}) {
                    for (int threads : {1, 2}) {
                        SCOPED_TRACE(testing::Message()
                                     << "m=" << m << " k=" << k << " n=" << n << " threads=" << threads);
                        check_shape({m, k, n}, threads, seed++, isa);
                    }
                }
            }
        }
    });
}

TEST(LinearTest, GemmRowRemaindersMatchReference) {
    // The GEMMs take rows in blocks (6 on AVX2, 12 in the avx512 f32 GEMM, 8 in the rounded one):
    // every remainder of each, with k across two blocks of the f32 GEMM and n across its 256-row
    // packing block with a partial panel.
    for_each_mode([&](cpu::Isa isa) {
        uint32_t seed = 900;
        for (int64_t m = 9; m <= 33; ++m) {
            SCOPED_TRACE(testing::Message() << "m=" << m);
            check_shape({m, 270, 301}, 1, seed++, isa);
        }
    });
}

TEST(LinearTest, ZeroRowsIsNoOp) {
    ThreadPool pool(2);
    std::vector<uint16_t> w(8, 0);
    float out = 42.0f;
    linear_bf16(pool, nullptr, 0, 4, w.data(), 2, &out);
    EXPECT_EQ(out, 42.0f);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
