// linear_bf16 / linear_f32: splits the output features n into chunks the pool's threads pull
// dynamically; each runs the single-threaded GEMV (m <= 8) or packed GEMM tile of
// matmul_tile_avx2.cpp on its chunk.
#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "moeserve/kernels/cpu/linear.h"
#include "moeserve/kernels/cpu/matmul_tile.h"

namespace moeserve::kernels::cpu {
namespace {

// Below this many multiply-adds the fork/join costs more than it saves.
constexpr int64_t kMinParallelMacs = 1 << 15;

// One column chunk [j0, j1) of out: from x rounded once for all chunks (xb) where the bf16 tile
// rounds its rows (matmul_tile.h), else from x.
template <typename W>
void linear_chunk(const float* x, const uint16_t* xb, int64_t m, int64_t k, const W* w, int64_t n, int64_t j0,
                  int64_t j1, float* out, float* pack) {
    if constexpr (std::is_same_v<W, uint16_t>) {
        if (xb != nullptr) {
            detail::matmul_tile_rounded(xb, m, k, w + j0 * k, j1 - j0, out + j0, n, pack);
            return;
        }
    }
    detail::matmul_tile(x, k, m, k, w + j0 * k, j1 - j0, out + j0, n, pack);
}

template <typename W>
void linear_impl(ThreadPool& pool, const float* x, int64_t m, int64_t k, const W* w, int64_t n, float* out) {
    if (m <= 0) return;
    const bool gemm = m > detail::kGemvMaxRows;
    const int64_t grain = gemm ? 16 : 8;
    if (pool.num_threads() == 1 || m * n * k < kMinParallelMacs || n < 2 * grain) {
        std::vector<float> pack(gemm ? static_cast<size_t>(detail::matmul_pack_floats()) : 0);
        detail::matmul_tile(x, k, m, k, w, n, out, n, pack.data());
        return;
    }
    // Chunks of n pulled dynamically (about 8 per thread for GEMV, 4 for GEMM, whose chunks
    // each re-stream x): a thread that starts late or runs slower (another process on its
    // core) takes fewer, instead of the others waiting for it.
    const int64_t parts = (gemm ? 4 : 8) * int64_t{pool.num_threads()};
    const int64_t per_chunk = std::max<int64_t>(grain, (n + parts - 1) / parts);
    const int64_t chunk = (per_chunk + grain - 1) / grain * grain;
    const int64_t num_chunks = (n + chunk - 1) / chunk;
    // The calling thread's buffer, kept across calls (no page faults per call).
    thread_local std::vector<uint16_t> rounded;
    const uint16_t* xb = nullptr;
    if (std::is_same_v<W, uint16_t> && detail::matmul_rounds_x(m)) {
        rounded.resize(size_t(m * detail::rounded_row_stride(k)));
        detail::round_rows_bf16(x, k, m, k, rounded.data());
        xb = rounded.data();
    }
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        int64_t c = next.fetch_add(1, std::memory_order_relaxed);
        if (c >= num_chunks) return;
        std::vector<float> pack(gemm ? static_cast<size_t>(detail::matmul_pack_floats()) : 0);
        for (; c < num_chunks; c = next.fetch_add(1, std::memory_order_relaxed)) {
            const int64_t j0 = c * chunk, j1 = std::min(n, j0 + chunk);
            linear_chunk(x, xb, m, k, w, n, j0, j1, out, pack.data());
        }
    });
}

}  // namespace

void linear_bf16(ThreadPool& pool, const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out) {
    linear_impl(pool, x, m, k, w, n, out);
}

void linear_f32(ThreadPool& pool, const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* out) {
    linear_impl(pool, x, m, k, w, n, out);
}

}  // namespace moeserve::kernels::cpu
