// AVX2 rms_norm / add_rms_norm: one pass for the sum of squares, one to scale; rows split
// across threads when there is enough work.
#include <cmath>

#include "moeserve/kernels/cpu/norm.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

constexpr int64_t kMinParallelElems = 1 << 14;

// out may alias x.
void norm_row(const float* x, const float* weight, int64_t dim, float eps, float* out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i + 8 <= dim; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(v, v, a0);
    }
    float ss = simd::hsum(_mm256_add_ps(a0, a1));
    for (; i < dim; ++i) ss += x[i] * x[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= dim; i += 8) {
        _mm256_storeu_ps(out + i,
                         _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), _mm256_loadu_ps(weight + i)));
    }
    for (; i < dim; ++i) out[i] = x[i] * inv * weight[i];
}

template <typename F>
void for_rows(ThreadPool& pool, int64_t rows, int64_t dim, F&& fn) {
    if (pool.num_threads() == 1 || rows < 2 || rows * dim < kMinParallelElems) {
        fn(int64_t{0}, rows);
    } else {
        pool.parallel_for(rows, fn);
    }
}

}  // namespace

void rms_norm(ThreadPool& pool, const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out) {
    for_rows(pool, rows, dim, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) norm_row(x + r * dim, weight, dim, eps, out + r * dim);
    });
}

void add_rms_norm(ThreadPool& pool, float* residual, const float* x, const float* weight, int64_t rows, int64_t dim,
                  float eps, float* out) {
    for_rows(pool, rows, dim, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* res = residual + r * dim;
            const float* xr = x + r * dim;
            int64_t i = 0;
            for (; i + 8 <= dim; i += 8) {
                _mm256_storeu_ps(res + i, _mm256_add_ps(_mm256_loadu_ps(res + i), _mm256_loadu_ps(xr + i)));
            }
            for (; i < dim; ++i) res[i] += xr[i];
            norm_row(res, weight, dim, eps, out + r * dim);
        }
    });
}

}  // namespace moeserve::kernels::cpu
