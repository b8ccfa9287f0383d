// linear_bf16 / linear_f32: splits the output features n across the pool's threads; each thread
// runs the single-threaded GEMV (m <= 8) or packed GEMM tile of matmul_tile_avx2.cpp on its slice.
#include <algorithm>
#include <vector>

#include "moeserve/kernels/cpu/linear.h"
#include "moeserve/kernels/cpu/matmul_tile.h"

namespace moeserve::kernels::cpu {
namespace {

// Below this many multiply-adds the fork/join costs more than it saves.
constexpr int64_t kMinParallelMacs = 1 << 15;

template <typename W>
void linear_impl(ThreadPool& pool, const float* x, int64_t m, int64_t k, const W* w, int64_t n,
                 float* out) {
    if (m <= 0) return;
    const bool gemm = m > detail::kGemvMaxRows;
    const int64_t grain = gemm ? 16 : 8;
    auto slice = [&](int64_t j0, int64_t j1) {
        std::vector<float> pack(gemm ? static_cast<size_t>(detail::matmul_pack_floats()) : 0);
        detail::matmul_tile(x, k, m, k, w + j0 * k, j1 - j0, out + j0, n, pack.data());
    };
    if (pool.num_threads() == 1 || m * n * k < kMinParallelMacs || n < 2 * grain) {
        slice(0, n);
        return;
    }
    pool.parallel_for(n, slice, grain);
}

}  // namespace

void linear_bf16(ThreadPool& pool, const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                 float* out) {
    linear_impl(pool, x, m, k, w, n, out);
}

void linear_f32(ThreadPool& pool, const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                float* out) {
    linear_impl(pool, x, m, k, w, n, out);
}

}  // namespace moeserve::kernels::cpu
