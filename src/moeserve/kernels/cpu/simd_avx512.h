// AVX-512 helpers the attention kernels share: widening cache elements to f32 and exp for 16
// lanes. Include only from *_avx512.cpp files. `static inline`: each file keeps its own copy, so
// nothing compiled with -mavx512* is merged across files by the linker (matmul_tile_isa.h says
// why that matters).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "moeserve/kernels/cpu/exp_poly.h"

namespace moeserve::kernels::cpu::detail::simd512 {

// 16 cache elements -> 16 f32. fp8 e4m3 comes out times 2^-8 (the f16 trick simd_avx2.h explains).
static inline __m512 widen16(const float* p) { return _mm512_loadu_ps(p); }
static inline __m512 widen16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline __m512 widen16(const uint8_t* p) {
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 8);
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(static_cast<short>(0xbfff))));
}
inline constexpr float kE4m3Unit = 256.0f;  // undoes widen16's 2^-8 for fp8

// exp(x) for 16 lanes (constants and method: exp_poly.h); lanes below kExpMin (exp underflows
// f32's normals, and masked keys at -inf) give exactly 0; scalef applies 2^n.
static inline __m512 exp16(__m512 x) {
    using namespace exp_poly;
    const __m512 lo = _mm512_set1_ps(kExpMin);
    const __mmask16 live = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(kExpMax)), lo);
    const __m512 n =
        _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kC5);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC0));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}

}  // namespace moeserve::kernels::cpu::detail::simd512
