// AVX2 apply_rope. NeoX: the two halves are separate vectors. Interleaved: cos/sin are duplicated
// per pair and addsub gives (x0 c - x1 s, x1 c + x0 s) on the swapped lanes.
#include "moeserve/kernels/cpu/rope.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

void rope_neox(float* x, int64_t half, const float* c, const float* s) {
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
        const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + half + i);
        const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
        _mm256_storeu_ps(x + i, _mm256_fmsub_ps(x0, cv, _mm256_mul_ps(x1, sv)));
        _mm256_storeu_ps(x + half + i, _mm256_fmadd_ps(x1, cv, _mm256_mul_ps(x0, sv)));
    }
    for (; i < half; ++i) {
        const float x0 = x[i], x1 = x[half + i];
        x[i] = x0 * c[i] - x1 * s[i];
        x[half + i] = x1 * c[i] + x0 * s[i];
    }
}

void rope_interleaved(float* x, int64_t half, const float* c, const float* s) {
    int64_t i = 0;
    for (; i + 4 <= half; i += 4) {
        const __m128 c4 = _mm_loadu_ps(c + i), s4 = _mm_loadu_ps(s + i);
        const __m256 cv = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
        const __m256 sv = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
        const __m256 xv = _mm256_loadu_ps(x + 2 * i);
        const __m256 sw = _mm256_permute_ps(xv, 0xB1);  // (x1, x0) per pair
        _mm256_storeu_ps(x + 2 * i, _mm256_addsub_ps(_mm256_mul_ps(xv, cv), _mm256_mul_ps(sw, sv)));
    }
    for (; i < half; ++i) {
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c[i] - x1 * s[i];
        x[2 * i + 1] = x1 * c[i] + x0 * s[i];
    }
}

}  // namespace

void apply_rope(const RopeArgs& a) {
    const int64_t half = a.rotary_dim / 2;
    for (int64_t t = 0; t < a.num_tokens; ++t) {
        const float* c = a.cos + int64_t{a.positions[t]} * half;
        const float* s = a.sin + int64_t{a.positions[t]} * half;
        for (int64_t h = 0; h < a.num_heads; ++h) {
            float* x = a.x + t * a.token_stride + h * a.head_stride;
            if (a.style == RopeStyle::kNeox) {
                rope_neox(x, half, c, s);
            } else {
                rope_interleaved(x, half, c, s);
            }
        }
    }
}

}  // namespace moeserve::kernels::cpu
