// linear_int4's threading: the output columns split over the pool, each slice one int4 tile (W4A8:
// the activations quantized once first).
#include "moeserve/kernels/cpu/linear_int4.h"

#include "moeserve/kernels/cpu/linear_w4a8.h"

namespace moeserve::kernels::cpu {

namespace {
// Below this much work one thread is faster than waking the pool.
constexpr int64_t kMinParallelMacs = 1 << 15;
}  // namespace

void linear_int4(ThreadPool& pool, const float* x, int64_t m, const Int4Weights& w, float* out) {
    if (m <= 0) return;
    W4a8Rows quantized;
    if (w.int8_activations) {
        thread_local W4a8Buffer buffer;  // the calling thread's: the pool fills its rows, then the slices read it
        quantized = quantize_w4a8_rows(x, w.k, m, w.k, w.group_size, buffer, &pool);
    }
    auto slice = [&](int64_t j0, int64_t j1) {
        if (w.int8_activations) {
            detail::matmul_tile_w4a8(quantized, m, w.rows(j0, j1 - j0), out + j0, w.n);
        } else {
            detail::matmul_tile_int4(x, w.k, m, w.rows(j0, j1 - j0), out + j0, w.n);
        }
    };
    if (pool.num_threads() <= 1 || m * w.n * w.k < kMinParallelMacs || w.n < 16) {
        slice(0, w.n);
        return;
    }
    pool.parallel_for(w.n, slice, 8);
}

}  // namespace moeserve::kernels::cpu
