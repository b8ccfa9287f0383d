// AVX2 GGUF dot products (see gguf_dot.h). The weights stay in their blocks: nibbles are split
// with a mask and a 16-bit shift, high bits merged in, and vpmaddubsw multiplies the unsigned
// weight bytes by the signed activation bytes (no pair can saturate: at most 63 * 127 * 2), then
// vpmaddwd applies the sub-block scale in int32. Q4_0 / Q8_0 have signed weights, so they use
// the sign trick (|w| times a with w's sign) and accumulate d_w * d_a * isum in 8 f32 lanes. The
// K-quants reduce each super-block to its exact integer sums and then run the reference's f32
// operations, so their result has the reference's bits.
#include "moeserve/kernels/cpu/gguf_dot_avx2.h"

#include <immintrin.h>

#include <cstring>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot_isa.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu::detail {
namespace {

using namespace avx2;

template <class W>
float dot_q8_0_acts(int64_t nb, const void* w, const void* a) {
    const auto* x = static_cast<const typename W::Block*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) acc = step_q8_0(acc, W::values(x[b]), W::scale(x[b]), y[b]);
    return simd::hsum(acc);
}

// Q4_1 / Q5_1 (y = d q + m, q unsigned): d_w d_a sum q * q8 and m d_a sum q8 in two sets of 8 f32
// lanes.
template <class W>
float dot_min_q8_0_acts(int64_t nb, const void* w, const void* a) {
    const auto* x = static_cast<const typename W::Block*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    __m256 acc_min = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) step_min_q8_0(acc, acc_min, W::values(x[b]), x[b], y[b]);
    return simd::hsum(_mm256_add_ps(acc, acc_min));
}

// The integer sums of one Q4_K / Q5_K super-block (qh null for Q4_K): sum_j sc_j * sum q * q8.
int isum_k4(const uint8_t* scales, const uint8_t* qh, const uint8_t* qs, const BlockQ8_K& a, int& isum_min) {
    uint8_t sc[8];
    uint8_t m[8];
    isum_min = 0;
    for (int j = 0; j < 8; ++j) {
        unpack_scale_min_k4(j, scales, sc[j], m[j]);
        isum_min += m[j] * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i hbits = qh != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)) : __m256i{};
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh != nullptr) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(shift_right(hbits, 2 * c), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(shift_right(hbits, 2 * c + 1), one), 4));
        }
        const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 64 * c));
        const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 64 * c + 32));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(sc[2 * c])));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(sc[2 * c + 1])));
    }
    return hsum_i32(acc);
}

// ---- Q2_K / Q3_K: 16 sub-blocks of 16, 2-bit values (Q3_K: plus a high bit) ----

// The 16-bit scales of sub-blocks 8 h + 2 s (low 128-bit lane) and 8 h + 2 s + 1 (high lane),
// the halves vpmaddubsw makes of 32 consecutive elements, from half_scales: the 8 scales of
// half h in both 128-bit lanes. One vpshufb: 16-bit lane 2 s low, 2 s + 1 high.
inline __m256i pair_scales(__m256i half_scales, int s) {
    const __m256i first = _mm256_set_m128i(_mm_set1_epi16(0x0302), _mm_set1_epi16(0x0100));
    return _mm256_shuffle_epi8(half_scales, _mm256_add_epi8(first, _mm256_set1_epi8(static_cast<char>(4 * s))));
}

// sum_j scale_j * sum q * q8 over the 16 sub-blocks of one Q2_K / Q3_K super-block, in 8 int32
// lanes: scales16 holds the 16 scales as 16-bit lanes (j = 0-7 in the low 128 bits) and
// values(h, s) the unsigned bytes q of elements 128 h + 32 s + l, l = 0-31 (at most 7, so the
// pair sums of vpmaddubsw stay far from saturating, q8 = -128 included).
template <typename Values>
__m256i isum_k16(__m256i scales16, const int8_t* q8, Values&& values) {
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
        const __m256i half = h == 0 ? _mm256_permute2x128_si256(scales16, scales16, 0x00)
                                    : _mm256_permute2x128_si256(scales16, scales16, 0x11);
        for (int s = 0; s < 4; ++s) {
            const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 128 * h + 32 * s));
            const __m256i p = _mm256_maddubs_epi16(values(h, s), y);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, pair_scales(half, s)));
        }
    }
    return acc;
}

// sum_j sc_j * sum (q - 32) * q8 of one Q6_K super-block: q (0-63) times q8 in vpmaddubsw, the
// 32 taken out afterwards through the activation block sums. The 16 scales are widened once and
// placed per pair of sub-blocks by pair_scales, and the offset is one vpmaddwd: the same exact
// integer sum as the scalar reference, with no per-sub-block scalar loads.
int isum_q6_k(const BlockQ6_K& w, const BlockQ8_K& a) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)));
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
        const __m256i half = h == 0 ? _mm256_permute2x128_si256(scales16, scales16, 0x00)
                                    : _mm256_permute2x128_si256(scales16, scales16, 0x11);
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh + 32 * h));
        for (int r = 0; r < 4; ++r) {
            const __m256i ql = shift_right(r % 2 == 0 ? ql0 : ql1, 4 * (r / 2));
            const __m256i high = _mm256_slli_epi16(_mm256_and_si256(shift_right(qh, 2 * r), m3), 4);
            const __m256i q = _mm256_or_si256(_mm256_and_si256(ql, m4), high);
            const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 128 * h + 32 * r));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), pair_scales(half, r)));
        }
    }
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums));
    const __m256i offset = _mm256_madd_epi16(scales16, bsums);  // sum_j sc_j * bsums_j
    return hsum_i32(_mm256_sub_epi32(acc, _mm256_slli_epi32(offset, 5)));
}

// Q2_K: sum_j (sc_j & 15) * sum q * q8, and in isum_min sum_j (sc_j >> 4) * bsums_j.
int isum_q2_k(const BlockQ2_K& w, const BlockQ8_K& a, int& isum_min) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i scales = _mm256_cvtepu8_epi16(_mm_and_si128(packed, m4));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums));
    isum_min = hsum_i32(_mm256_madd_epi16(mins, bsums));
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i q[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs)),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32))};
    return hsum_i32(
        isum_k16(scales, a.qs, [&](int h, int s) { return _mm256_and_si256(shift_right(q[h], 2 * s), m3); }));
}

// Q3_K: sum_j (scale_j - 32) * sum (q - 4) * q8, q = the 2 bits | hbit << 2 (0-7, unsigned for
// vpmaddubsw), the 4 taken out afterwards through the activation block sums.
int isum_q3_k(const BlockQ3_K& w, const BlockQ8_K& a) {
    const __m256i scales = q3_k_scales(w.scales);
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.hmask));
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i q[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs)),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32))};
    const __m256i acc = isum_k16(scales, a.qs, [&](int h, int s) {
        // element 32 b + l's high bit is bit b of hmask[l], b = 4 h + s here
        const __m256i hbit = _mm256_slli_epi16(_mm256_and_si256(shift_right(hmask, 4 * h + s), one), 2);
        return _mm256_or_si256(_mm256_and_si256(shift_right(q[h], 2 * s), m3), hbit);
    });
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums));
    const __m256i offset = _mm256_madd_epi16(scales, bsums);  // sum_j (scale_j - 32) * bsums_j
    return hsum_i32(_mm256_sub_epi32(acc, _mm256_slli_epi32(offset, 2)));
}

// The K-quants with a min (Q2_K, Q4_K, Q5_K): per super-block, d d_a isum - dmin d_a isum_min in
// the scalar reference's f32 order, so these kernels keep its bits.
template <class Block, class Isum>
float dot_k_with_min(int64_t nb, const void* w, const void* a, Isum&& isum_of) {
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum_min = 0;
        const int isum = isum_of(x[b], y[b], isum_min);
        sum += (f16(x[b].d) * y[b].d) * static_cast<float>(isum);
        sum -= (f16(x[b].dmin) * y[b].d) * static_cast<float>(isum_min);
    }
    return sum;
}

}  // namespace

float vec_dot_q4_0_q8_0_avx2(int64_t nb, const void* w, const void* a) { return dot_q8_0_acts<Q4_0Weights>(nb, w, a); }
float vec_dot_q5_0_q8_0_avx2(int64_t nb, const void* w, const void* a) { return dot_q8_0_acts<Q5_0Weights>(nb, w, a); }
float vec_dot_q8_0_q8_0_avx2(int64_t nb, const void* w, const void* a) { return dot_q8_0_acts<Q8_0Weights>(nb, w, a); }
float vec_dot_mxfp4_q8_0_avx2(int64_t nb, const void* w, const void* a) {
    return dot_q8_0_acts<Mxfp4Weights>(nb, w, a);
}
float vec_dot_q4_1_q8_0_avx2(int64_t nb, const void* w, const void* a) {
    return dot_min_q8_0_acts<Q4_1Weights>(nb, w, a);
}
float vec_dot_q5_1_q8_0_avx2(int64_t nb, const void* w, const void* a) {
    return dot_min_q8_0_acts<Q5_1Weights>(nb, w, a);
}

float vec_dot_q2_k_q8_k_avx2(int64_t nb, const void* w, const void* a) {
    return dot_k_with_min<BlockQ2_K>(
        nb, w, a, [](const BlockQ2_K& x, const BlockQ8_K& y, int& isum_min) { return isum_q2_k(x, y, isum_min); });
}

float vec_dot_q3_k_q8_k_avx2(int64_t nb, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ3_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) sum += (f16(x[b].d) * y[b].d) * static_cast<float>(isum_q3_k(x[b], y[b]));
    return sum;
}

float vec_dot_q4_k_q8_k_avx2(int64_t nb, const void* w, const void* a) {
    return dot_k_with_min<BlockQ4_K>(nb, w, a, [](const BlockQ4_K& x, const BlockQ8_K& y, int& isum_min) {
        return isum_k4(x.scales, nullptr, x.qs, y, isum_min);
    });
}

float vec_dot_q5_k_q8_k_avx2(int64_t nb, const void* w, const void* a) {
    return dot_k_with_min<BlockQ5_K>(nb, w, a, [](const BlockQ5_K& x, const BlockQ8_K& y, int& isum_min) {
        return isum_k4(x.scales, x.qh, x.qs, y, isum_min);
    });
}

float vec_dot_q6_k_q8_k_avx2(int64_t nb, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ6_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) sum += (f16(x[b].d) * y[b].d) * static_cast<float>(isum_q6_k(x[b], y[b]));
    return sum;
}

}  // namespace moeserve::kernels::cpu::detail
