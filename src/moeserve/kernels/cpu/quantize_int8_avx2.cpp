// quantize_rows_int8 with AVX2: absmax over 8 lanes, then multiply, round to nearest even
// (vcvtps2dq under the default MXCSR) and pack 32 values to int8 with saturating packs.
#include <immintrin.h>

#include <cmath>

#include "moeserve/kernels/cpu/quantize_int8.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {

void quantize_rows_int8(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* q, int64_t ldq, float* scales) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    // vpackss* work per 128-bit lane; this permutation restores the element order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx;
        int8_t* qi = q + i * ldq;
        __m256 mx = _mm256_setzero_ps();
        int64_t p = 0;
        for (; p + 8 <= k; p += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(abs_mask, _mm256_loadu_ps(xi + p)));
        float amax = simd::hmax(mx);
        for (; p < k; ++p) amax = std::fmax(amax, std::fabs(xi[p]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scales[i] = amax / 127.0f;
        const __m256 vinv = _mm256_set1_ps(inv);
        p = 0;
        for (; p + 32 <= k; p += 32) {
            const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xi + p), vinv));
            const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xi + p + 8), vinv));
            const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xi + p + 16), vinv));
            const __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xi + p + 24), vinv));
            const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
            const __m256i abcd = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(qi + p), abcd);
        }
        for (; p < k; ++p) qi[p] = static_cast<int8_t>(std::nearbyint(xi[p] * inv));
        for (p = k; p < ldq; ++p) qi[p] = 0;
    }
}

}  // namespace moeserve::kernels::cpu
