// Internal: the AVX2 pieces that the GGUF pair kernels (gguf_dot_avx2.cpp) and the AVX2 tiles
// (gguf_tiles_avx2.cpp) share. A tile runs each of its pairs through these same steps, so its
// results have the pair kernels' bits (a token's result does not depend on its batch).
// x86-64-v3 code, included only by those two files.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu::detail::avx2 {

// f16 -> f32 with F16C (x86-64-v3). Equal to core's f16_to_f32 for every non-NaN value; a
// signalling NaN comes out quiet, which a product with it would make it anyway.
inline float f16(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

// Eight int32 sums of pairs of products of signed bytes x and y (|x| * (y with x's sign)).
inline __m256i dot_i8(__m256i x, __m256i y) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// Each byte shifted right by `count` bits (a 16-bit shift; the caller masks the bits it keeps).
inline __m256i shift_right(__m256i v, int count) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(count)); }

// The 32 nibbles of a 32-element block as bytes 0-15, element i in byte i.
inline __m256i nibbles32(const uint8_t* qs) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// Q5_0 / Q5_1's fifth bits: byte i is 0x10 where bit i of the little-endian u32 at qh is set.
// Each byte is given its qh byte (i / 8), then tests its own bit (i % 8) of it.
inline __m256i fifth_bits32(const uint8_t* qh) {
    uint32_t bits = 0;
    std::memcpy(&bits, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Q3_K's 16 scales minus 32 (-32..31) as 16-bit lanes, from the 12 packed bytes (BlockQ3_K):
// read as 8 + 4 bytes, never past them (the block may end a mapped row two bytes later).
inline __m256i q3_k_scales(const uint8_t* packed) {
    uint64_t low8 = 0;
    uint32_t high4 = 0;
    std::memcpy(&low8, packed, 8);
    std::memcpy(&high4, packed + 8, 4);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_cvtsi64_si128(static_cast<int64_t>(low8));
    // scales 0-7: the low nibbles of bytes 0-7; scales 8-15: their high nibbles
    const __m128i nibbles = _mm_unpacklo_epi64(_mm_and_si128(lo, m4), _mm_and_si128(_mm_srli_epi16(lo, 4), m4));
    // scale j's top 2 bits are bits 2 (j / 4) of byte 8 + j % 4: 32-bit lane j / 4 holds bytes
    // 8-11 shifted right by 2 (j / 4); the mask drops what the shift brings in from the next byte
    const __m128i top = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(high4)), _mm_set_epi32(6, 4, 2, 0)), _mm_set1_epi8(3));
    const __m128i scales = _mm_or_si128(nibbles, _mm_slli_epi16(top, 4));
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(scales), _mm256_set1_epi16(32));
}

// ---- The 32-element types against q8_0: each block's weights as bytes, and its scale ----

// Signed weights (the dot_i8 sign trick): Q4_0, Q5_0, Q8_0, MXFP4.
struct Q4_0Weights {
    using Block = BlockQ4_0;
    static __m256i values(const Block& x) { return _mm256_sub_epi8(nibbles32(x.qs), _mm256_set1_epi8(8)); }
    static float scale(const Block& x) { return f16(x.d); }
};
struct Q5_0Weights {
    using Block = BlockQ5_0;
    static __m256i values(const Block& x) {
        return _mm256_sub_epi8(_mm256_or_si256(nibbles32(x.qs), fifth_bits32(x.qh)), _mm256_set1_epi8(16));
    }
    static float scale(const Block& x) { return f16(x.d); }
};
struct Q8_0Weights {
    using Block = BlockQ8_0;
    static __m256i values(const Block& x) { return load256(x.qs); }
    static float scale(const Block& x) { return f16(x.d); }
};
// vpshufb looks each nibble up in the 16 doubled e2m1 values (signed bytes, |v| <= 12); the
// scale is 2^(e - 128).
struct Mxfp4Weights {
    using Block = BlockMXFP4;
    static __m256i values(const Block& x) {
        const __m256i table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
        return _mm256_shuffle_epi8(table, nibbles32(x.qs));
    }
    static float scale(const Block& x) { return e8m0_to_f32_half(x.e); }
};
// Unsigned weights with a min (y = d q + m): Q4_1, Q5_1.
struct Q4_1Weights {
    using Block = BlockQ4_1;
    static __m256i values(const Block& x) { return nibbles32(x.qs); }
};
struct Q5_1Weights {
    using Block = BlockQ5_1;
    static __m256i values(const Block& x) { return _mm256_or_si256(nibbles32(x.qs), fifth_bits32(x.qh)); }
};

// One block of a signed-weight pair: acc += (d_w * d_a) * sum x y in 8 f32 lanes (each lane the
// exact int32 sum of 4 products).
inline __m256 step_q8_0(__m256 acc, __m256i x, float d_w, const BlockQ8_0& a) {
    const __m256i p = dot_i8(x, load256(a.qs));
    const __m256 d = _mm256_set1_ps(d_w * f16(a.d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
}

// One block of an unsigned-weight pair with a min: d_w d_a sum q * q8 into acc and m d_a sum q8
// into acc_min (q <= 31 times an int8 in vpmaddubsw cannot saturate).
template <class Block>
inline void step_min_q8_0(__m256& acc, __m256& acc_min, __m256i q, const Block& w, const BlockQ8_0& a) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i y = load256(a.qs);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), ones16);
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), y), ones16);
    const float da = f16(a.d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w.d) * da), _mm256_cvtepi32_ps(p), acc);
    acc_min = _mm256_fmadd_ps(_mm256_set1_ps(f16(w.m) * da), _mm256_cvtepi32_ps(s), acc_min);
}

}  // namespace moeserve::kernels::cpu::detail::avx2
