// Internal AVX2/FMA helpers shared by the *_avx2.cpp kernels: bf16 and e4m3 -> f32 loads,
// horizontal sums, a vectorized exp and the online softmax's tile step. Not part of the kernels'
// public API.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "moeserve/kernels/cpu/exp_poly.h"

namespace moeserve::kernels::cpu::simd {

// 8 bf16 -> 8 f32: zero-extend to 32 bits and shift into the high half.
inline __m256 load8(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

inline float to_f32(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
inline float to_f32(float f) { return f; }

// An fp8 e4m3 ("fn") code of an fp8 KV cache, as its own type so that load8 / to_f32 overload on it.
struct E4m3 {
    uint8_t bits;
};
// e4m3 widens through f16 (F16C, part of x86-64-v3): the sign goes to bit 15 and the 7 magnitude
// bits (exponent, mantissa) to bits 7..13, i.e. the low 4 bits of f16's 5-bit exponent and the top
// 3 of its mantissa. With f16's exponent bias 15 against e4m3's 7 that f16 is the e4m3 value times
// 2^-8, exactly, for normals and subnormals alike (f16 subnormals are m * 2^-24, e4m3's m * 2^-9).
// So these return value * 2^-8; callers multiply by kE4m3Unit times the row's scale, once per row
// where they can. The NaN codes 0x7f / 0xff (never written: writes saturate) come out finite.
inline constexpr float kE4m3Unit = 256.0f;

// 8 e4m3 -> 8 f32 (times 2^-8): each byte into the high half of a 16-bit lane, an arithmetic shift
// right by one puts the magnitude at bits 7..13 and copies the sign into bits 15 and 14, and the
// mask clears bit 14.
inline __m256 load8(const E4m3* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i h = _mm_unpacklo_epi8(_mm_setzero_si128(), b);
    return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(h, 1), _mm_set1_epi16(static_cast<int16_t>(0xbfff))));
}
inline float to_f32(E4m3 v) {
    const auto h = static_cast<uint16_t>(((v.bits & 0x80u) << 8) | ((v.bits & 0x7fu) << 7));
    return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Sums of 8 vectors at once: result[i] = hsum(v[i]).
inline __m256 hsum8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6, __m256 a7) {
    const __m256 t0 = _mm256_hadd_ps(a0, a1), t1 = _mm256_hadd_ps(a2, a3);
    const __m256 t2 = _mm256_hadd_ps(a4, a5), t3 = _mm256_hadd_ps(a6, a7);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// exp(x) for 8 lanes (constants and method: exp_poly.h); exp(-inf) = 0, large x saturates.
inline __m256 exp8(__m256 x) {
    using namespace exp_poly;
    x = _mm256_min_ps(x, _mm256_set1_ps(kExpMax));
    x = _mm256_max_ps(x, _mm256_set1_ps(kExpMin));
    const __m256 n =
        _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kC5);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC0));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// An online softmax's tile step: p[j] = exp(p[j] - m) for j < n (8 at a time, then the tail);
// returns their sum.
inline float exp_shifted_sum(float* p, int64_t n, float m) {
    float sum = 0.0f;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_load_ps(p + j), _mm256_set1_ps(m)));
        _mm256_store_ps(p + j, e);
        sum += hsum(e);
    }
    for (; j < n; ++j) sum += p[j] = std::exp(p[j] - m);
    return sum;
}

}  // namespace moeserve::kernels::cpu::simd
