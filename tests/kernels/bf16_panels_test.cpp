// bf16 weights repacked into panels (bf16_panels.h): the repacked matrix holds every element
// where bf16_panel_at says, and linear_bf16_panels equals the scalar reference on the stored rows
// for every row count 1..64 (the GEMV's 1..12 and the GEMM's row blocks and remainders), ragged n
// and k, and 1-3 threads, at every ISA level.
#include "moeserve/kernels/cpu/bf16_panels.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "kernel_test_util.h"
#include "moeserve/kernels/cpu/linear.h"

namespace moeserve::kernels::cpu {
namespace {

using test::expect_close;
using test::Floats;

// f32 sums over k in another order than the (double) reference: linear_test's bound.
constexpr float kTol = 2e-6f;

struct Panels {
    std::unique_ptr<uint16_t, decltype(&std::free)> data{nullptr, &std::free};
};

// w [n, k] repacked into 64-byte aligned memory, filled with 0xffff first, so a pad element left
// unwritten would show as a NaN in the products; by 3 threads, so that every element test also
// checks that the threads' shares of the panels tile the matrix.
Panels repack(const std::vector<uint16_t>& w, int64_t n, int64_t k) {
    const size_t bytes = bf16_panel_bytes(n, k);
    Panels p;
    p.data.reset(static_cast<uint16_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    std::fill(p.data.get(), p.data.get() + bytes / 2, uint16_t{0xffff});
    ThreadPool pool(3);
    pack_bf16_panels(pool, w.data(), k, n, k, p.data.get());
    return p;
}

void check(int64_t m, int64_t k, int64_t n, int threads, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " k=" << k << " n=" << n << " threads=" << threads);
    std::mt19937 rng(seed);
    ThreadPool pool(threads);
    Floats x(m * k), out(m * n), ref(m * n);
    test::fill_uniform(x.data(), m * k, rng);
    const std::vector<uint16_t> w = test::random_bf16(n * k, rng);
    const Panels p = repack(w, n, k);
    linear_bf16_panels(pool, x.data(), m, k, p.data.get(), n, out.data());
    linear_bf16_ref(x.data(), m, k, w.data(), n, ref.data());
    expect_close(out.data(), ref.data(), m * n, kTol * float(k), "panels");
}

TEST(Bf16PanelsTest, RepackedElementsAreTheOriginals) {
    std::mt19937 rng(7);
    for (int64_t n : {1, 31, 32, 33, 70}) {
        for (int64_t k : {1, 5, 64}) {
            const std::vector<uint16_t> w = test::random_bf16(n * k, rng);
            const Panels p = repack(w, n, k);
            EXPECT_EQ(bf16_panel_bytes(n, k), size_t((n + 31) / 32 * 32 * k * 2));
            for (int64_t r = 0; r < n; ++r) {
                for (int64_t c = 0; c < k; ++c) ASSERT_EQ(bf16_panel_at(p.data.get(), k, r, c), w[r * k + c]);
            }
            for (int64_t r = n; r < (n + 31) / 32 * 32; ++r) {  // the last panel's pad rows are zero
                for (int64_t c = 0; c < k; ++c) ASSERT_EQ(bf16_panel_at(p.data.get(), k, r, c), 0);
            }
        }
    }
}

TEST(Bf16PanelsTest, EveryRowCountMatchesReference) {
    test::for_each_isa([&](Isa) {
        uint32_t seed = 1;
        for (int64_t m = 1; m <= 64; ++m) check(m, 77, 45, 2, seed++);
    });
}

TEST(Bf16PanelsTest, RaggedShapesAndThreadsMatchReference) {
    test::for_each_isa([&](Isa) {
        uint32_t seed = 100;
        for (int threads : {1, 2, 3}) {
            for (int64_t m : {1, 3, 12, 13, 100, 200}) {
                for (int64_t k : {1, 2, 7, 255, 256, 257, 600}) {
                    for (int64_t n : {1, 16, 17, 32, 95, 300}) check(m, k, n, threads, seed++);
                }
            }
        }
    });
}

TEST(Bf16PanelsTest, ZeroRowsIsNoOp) {
    ThreadPool pool(2);
    const std::vector<uint16_t> w(32 * 8, 0);
    const Panels p = repack(w, 32, 8);
    float out = 42.0f;
    linear_bf16_panels(pool, nullptr, 0, 8, p.data.get(), 32, &out);
    EXPECT_EQ(out, 42.0f);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
