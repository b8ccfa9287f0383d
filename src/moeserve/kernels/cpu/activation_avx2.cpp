// AVX2 silu_mul with the vectorized exp of simd_avx2.h.
#include <cmath>

#include "moeserve/kernels/cpu/activation.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {

void silu_mul(const float* gate_up, int64_t rows, int64_t inter, float* out) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t r = 0; r < rows; ++r) {
        const float* g = gate_up + r * 2 * inter;
        const float* u = g + inter;
        float* o = out + r * inter;
        int64_t i = 0;
        for (; i + 8 <= inter; i += 8) {
            const __m256 gv = _mm256_loadu_ps(g + i);
            const __m256 e = simd::exp8(_mm256_xor_ps(gv, sign));
            const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
            _mm256_storeu_ps(o + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
        }
        for (; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
}

}  // namespace moeserve::kernels::cpu
