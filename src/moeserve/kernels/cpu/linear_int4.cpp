// linear_int4's threading: the output columns split over the pool, each slice one int4 tile.
#include "moeserve/kernels/cpu/linear_int4.h"

namespace moeserve::kernels::cpu {

namespace {
// Below this much work one thread is faster than waking the pool.
constexpr int64_t kMinParallelMacs = 1 << 15;
}  // namespace

void linear_int4(ThreadPool& pool, const float* x, int64_t m, const Int4Weights& w, float* out) {
    if (m <= 0) return;
    auto slice = [&](int64_t j0, int64_t j1) {
        detail::matmul_tile_int4(x, w.k, m, w.rows(j0, j1 - j0), out + j0, w.n);
    };
    if (pool.num_threads() <= 1 || m * w.n * w.k < kMinParallelMacs || w.n < 16) {
        slice(0, w.n);
        return;
    }
    pool.parallel_for(w.n, slice, 8);
}

}  // namespace moeserve::kernels::cpu
