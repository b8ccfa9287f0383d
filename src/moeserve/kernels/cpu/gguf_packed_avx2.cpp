// AVX2 kernels on packed GGUF groups (gguf_packed.h): 8 weight rows times 1-4 activation rows.
// A 256-bit register holds 16 elements of rows p and p + 4 ([row p | row p + 4]); vpmaddubsw
// multiplies them by the activation's 16 matching bytes broadcast to both lanes, vpmaddwd adds
// pairs (with the sub-block scale for the K-quants), and three vphaddd over the four pairs leave
// rows 0-7's integer sums in lanes 0-7. The weights go in unsigned (nibbles, 5- and 6-bit values)
// and the offset comes off through the activation sums (exact); Q8_0 uses the sign trick. Then
// each lane runs the reference's f32 operations for its row, block after block, so every result
// has gguf_vec_dot_ref's bits (this file is built with -ffp-contract=off).
// x86-64-v3 code.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_packed_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i broadcast128(const void* p) { return _mm256_broadcastsi128_si256(load128(p)); }
inline __m256 load_f16x8(const uint8_t* p) { return _mm256_cvtph_ps(load128(p)); }

// The four pairs' int32 partial sums (lane group 0: row p, group 1: row p + 4) -> rows 0-7.
inline __m256i rows_of_pairs(const __m256i s[4]) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
}

// 16-bit element e (0-7) of each 128-bit lane in all of that lane's 16-bit elements.
inline __m256i broadcast16(__m256i v, int e) {
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<short>((2 * e + 1) << 8 | 2 * e)));
}

// Into L1, the packed bytes kPrefetchBytes further on (at least two blocks): the next group's past
// a group's end, groups being back to back. The hardware prefetchers alone left the decode GEMV
// stalling on the first load of each pair (perf), at 0.6-0.85 of the speed with it; 2 KiB ahead
// measured as well as 1 or 4 (docs/kernels.md).
inline constexpr size_t kPrefetchBytes = 2048;
inline void prefetch_ahead(const uint8_t* block, size_t bytes) {
    const uint8_t* ahead = block + std::max<size_t>(2 * bytes, kPrefetchBytes);
    for (size_t i = 0; i < bytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + i), _MM_HINT_T0);
}

template <int C>
inline void store_rows(const __m256 sum[C], int rows, float* out, int64_t ldo) {
    for (int c = 0; c < C; ++c) {
        if (rows == kGgufPackRows) {
            _mm256_storeu_ps(out + c * ldo, sum[c]);
        } else {
            alignas(32) float tmp[kGgufPackRows];
            _mm256_store_ps(tmp, sum[c]);
            std::memcpy(out + c * ldo, tmp, sizeof(float) * static_cast<size_t>(rows));
        }
    }
}

// The bytes of one packed block (one block column of 8 rows).
inline constexpr size_t kQ8_0Block = kGgufPackRows * sizeof(BlockQ8_0);
inline constexpr size_t kQ6_KBlock = kGgufPackRows * sizeof(BlockQ6_K);

// ---- The 32-element types (q8_0 activations, prepared as GgufPackedQ8Block) ----

// Unsigned weight bytes of pair p's two 16-element halves (elements 0-15 and 16-31).
struct Halves {
    __m256i lo, hi;
};

// The nibbles of the packed qs at pb (pair p's 32 bytes at 32 p).
inline void nibble_halves(const uint8_t* qs, Halves h[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
        const __m256i v = load256(qs + 32 * p);
        h[p].lo = _mm256_and_si256(v, m4);
        h[p].hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
}

// The 5-bit values of the gathered qh (row r's 32 fifth bits at 4 r) and the packed qs: byte i of
// a lane gets 0x10 where bit i (lo) or 16 + i (hi) of that lane's row's qh is set.
inline void five_bit_halves(const uint8_t* qh_at, const uint8_t* qs, Halves h[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i qh = load256(qh_at);  // lane r: row r's 32 fifth bits
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    const __m256i spread_lo = _mm256_set_epi64x(0x0101010101010101, 0, 0x0101010101010101, 0);
    const __m256i spread_hi =
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0303030303030303, 0x0202020202020202);
    for (int p = 0; p < 4; ++p) {
        const __m256i bits = _mm256_permutevar8x32_epi32(qh, _mm256_set_epi32(p + 4, p + 4, p + 4, p + 4, p, p, p, p));
        const auto fifth = [&](__m256i spread) {
            const __m256i byte = _mm256_and_si256(_mm256_shuffle_epi8(bits, spread), bit);
            return _mm256_and_si256(_mm256_cmpeq_epi8(byte, bit), _mm256_set1_epi8(0x10));
        };
        const __m256i v = load256(qs + 32 * p);
        h[p].lo = _mm256_or_si256(_mm256_and_si256(v, m4), fifth(spread_lo));
        h[p].hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), fifth(spread_hi));
    }
}

// Q4_0 (q - 8) and Q5_0 (q - 16): the offset times the activation sum. Q4_1 and Q5_1 (y = d q + m):
// no offset, and m times the activation sum (kMin). Packed: d at 0, m (kMin) at 16, then qh (the
// 5-bit types), then qs.
struct PackedQ4_0 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ4_0);
    static constexpr int kOffset = 8;  // q - 8
    static constexpr bool kMin = false;
    // A row's 32 products sum to at most 32 * 15 * 128 = 61440 in magnitude, but any 16 of them fit
    // 16 bits: the pairs reduce in 16-bit lanes (two vphaddw), then one vpmaddwd.
    static constexpr bool kSixteenFit = true;
    static __m256 scales(const uint8_t* pb) { return load_f16x8(pb); }
    static void halves(const uint8_t* pb, Halves h[4]) { nibble_halves(pb + 16, h); }
};

struct PackedQ4_1 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ4_1);
    static constexpr bool kMin = true;
    static constexpr bool kSixteenFit = true;  // as Q4_0's
    static __m256 scales(const uint8_t* pb) { return load_f16x8(pb); }
    static void halves(const uint8_t* pb, Halves h[4]) { nibble_halves(pb + 32, h); }
};

struct PackedQ5_0 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ5_0);
    static constexpr int kOffset = 16;  // q - 16
    static constexpr bool kMin = false;
    static constexpr bool kSixteenFit = false;  // 16 products of q <= 31 can reach 63488
    static __m256 scales(const uint8_t* pb) { return load_f16x8(pb); }
    static void halves(const uint8_t* pb, Halves h[4]) { five_bit_halves(pb + 16, pb + 48, h); }
};

// 2^(e - 128) for the 8 rows' e8m0 scales gathered at p: e8m0_to_f32_half's bits (e 0 and 1 the
// subnormals 2^-128 and 2^-127).
inline __m256 e8m0_half_x8(const uint8_t* p) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i below_2 = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, below_2));
}

// MXFP4: the nibbles index the doubled e2m1 values plus 12 (0-24, unsigned), 12 off through the
// activation sum; the e8m0 scales gathered at 0, qs at 8.
struct PackedMxfp4 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockMXFP4);
    static constexpr int kOffset = 12;
    static constexpr bool kMin = false;
    static constexpr bool kSixteenFit = false;  // 16 products of values <= 24 can reach 49152
    static __m256 scales(const uint8_t* pb) { return e8m0_half_x8(pb); }
    static void halves(const uint8_t* pb, Halves h[4]) {
        const __m256i values =
            _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
        nibble_halves(pb + 8, h);
        for (int p = 0; p < 4; ++p) {
            h[p].lo = _mm256_shuffle_epi8(values, h[p].lo);
            h[p].hi = _mm256_shuffle_epi8(values, h[p].hi);
        }
    }
};

struct PackedQ5_1 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ5_1);
    static constexpr bool kMin = true;
    static constexpr bool kSixteenFit = false;  // as Q5_0's
    static __m256 scales(const uint8_t* pb) { return load_f16x8(pb); }
    static void halves(const uint8_t* pb, Halves h[4]) { five_bit_halves(pb + 32, pb + 64, h); }
};

template <class W, int C>
void tile_unsigned32(int64_t nb, int rows, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 sum[C];
    for (int c = 0; c < C; ++c) sum[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pb = w + static_cast<size_t>(b) * W::kBlock;
        prefetch_ahead(pb, W::kBlock);
        const __m256 dw = W::scales(pb);
        Halves h[4];
        W::halves(pb, h);
        for (int c = 0; c < C; ++c) {
            const auto& y = reinterpret_cast<const GgufPackedQ8Block*>(a[c])[b];
            const __m256i ylo = broadcast128(y.qs);
            const __m256i yhi = broadcast128(y.qs + 16);
            __m256i p16[4];  // 16-bit sums of 4 products; Q5_0: <= 4 * 31 * 128 = 15872
            for (int p = 0; p < 4; ++p) {
                p16[p] = _mm256_add_epi16(_mm256_maddubs_epi16(h[p].lo, ylo), _mm256_maddubs_epi16(h[p].hi, yhi));
            }
            __m256i qa;  // the 8 rows' sums of q * a, in order
            if constexpr (W::kSixteenFit) {
                // lane group 0: rows 0-3 as 2 sums of 16 products each, group 1: rows 4-7
                const __m256i t =
                    _mm256_hadd_epi16(_mm256_hadd_epi16(p16[0], p16[1]), _mm256_hadd_epi16(p16[2], p16[3]));
                qa = _mm256_madd_epi16(t, ones);
            } else {
                __m256i s[4];
                for (int p = 0; p < 4; ++p) s[p] = _mm256_madd_epi16(p16[p], ones);
                qa = rows_of_pairs(s);
            }
            const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(y.d));
            if constexpr (W::kMin) {  // the reference's (d_w d_a) isum + (m d_a) asum
                const __m256 dm = _mm256_mul_ps(load_f16x8(pb + 16), _mm256_set1_ps(y.d));
                const __m256 with_min = _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(qa)),
                                                      _mm256_mul_ps(dm, _mm256_set1_ps(static_cast<float>(y.sum))));
                sum[c] = _mm256_add_ps(sum[c], with_min);
            } else {
                const __m256i isum = _mm256_sub_epi32(qa, _mm256_set1_epi32(y.sum * W::kOffset));
                sum[c] = _mm256_add_ps(sum[c], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
            }
        }
    }
    store_rows<C>(sum, rows, out, ldo);
}

// Q8_0: signed weights, |w| times the activation with w's sign (vpsignb), 32 elements of a row
// in two chunks.
template <int C>
void tile_q8_0(int64_t nb, int rows, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 sum[C];
    for (int c = 0; c < C; ++c) sum[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pb = w + static_cast<size_t>(b) * kQ8_0Block;
        prefetch_ahead(pb, kQ8_0Block);
        const __m256 dw = load_f16x8(pb);
        for (int c = 0; c < C; ++c) {
            const auto& y = reinterpret_cast<const GgufPackedQ8Block*>(a[c])[b];
            const __m256i yv[2] = {broadcast128(y.qs), broadcast128(y.qs + 16)};
            __m256i s[4];
            for (int p = 0; p < 4; ++p) {
                s[p] = _mm256_setzero_si256();
                for (int k = 0; k < 2; ++k) {
                    const __m256i x = load256(pb + 16 + 64 * p + 32 * k);
                    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(yv[k], x));
                    s[p] = _mm256_add_epi32(s[p], _mm256_madd_epi16(p16, ones));
                }
            }
            const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(y.d));
            sum[c] = _mm256_add_ps(sum[c], _mm256_mul_ps(d, _mm256_cvtepi32_ps(rows_of_pairs(s))));
        }
    }
    store_rows<C>(sum, rows, out, ldo);
}

// ---- K-quants (q8_K activations) ----

// Q6_K: y = d * sc_j * (q - 32), q 6 bits, 16 sub-blocks of 16 (gguf_blocks.h). Packed: d at 0,
// then pair p at 16 + 416 p: its scales ([row p 0-7 | row p + 4 0-7][8-15 | 8-15]), ql at + 32 (8
// chunks of 16) and qh at + 288 (4 chunks). Sub-block J (elements 16 J ..) of a pair is one
// register: ql chunk 4 h + 2 (r % 2) + J % 2 (nibble r / 2), qh chunk 2 h + J % 2 (bits 2 r),
// h = J / 8, r = (J % 8) / 2. J is a template argument so that every shift and shuffle is an
// immediate (a loop left them to run time and ran at a third of the speed).
template <int C, int J>
inline void q6_k_sub_block(const uint8_t* ql, const uint8_t* qh, const __m256i sc[2], const BlockQ8_K* const* y,
                           __m256i acc[C]) {
    constexpr int h = J / 8;
    constexpr int r = (J % 8) / 2;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i l = load256(ql + 32 * (4 * h + 2 * (r % 2) + J % 2));
    const __m256i low = _mm256_and_si256(r < 2 ? l : _mm256_srli_epi16(l, 4), m4);
    const __m256i hb = load256(qh + 32 * (2 * h + J % 2));
    __m256i high;  // bits 2 r, 2 r + 1 to bits 4, 5
    if constexpr (r == 0) {
        high = _mm256_slli_epi16(hb, 4);
    } else if constexpr (r == 1) {
        high = _mm256_slli_epi16(hb, 2);
    } else if constexpr (r == 2) {
        high = hb;
    } else {
        high = _mm256_srli_epi16(hb, 2);
    }
    const __m256i q = _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
    const __m256i scale = broadcast16(sc[h], J % 8);
    for (int c = 0; c < C; ++c) {
        const __m256i p16 = _mm256_maddubs_epi16(q, broadcast128(y[c]->qs + 16 * J));
        acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(p16, scale));
        __asm__("" : "+x"(acc[c]));  // in order, in its register (k4_sub_blocks says why)
    }
}

template <int C, int... J>
inline void q6_k_pair(const uint8_t* ql, const uint8_t* qh, const __m256i sc[2], const BlockQ8_K* const* y,
                      __m256i acc[C], std::integer_sequence<int, J...> /*sub-blocks*/) {
    (q6_k_sub_block<C, J>(ql, qh, sc, y, acc), ...);
}

// sum_j sc_j * bsums_j of a row pair's 16 scales (sc: 0-7, 8-15, 16-bit) and an activation's
// bsums (bs: 0-7, 8-15, in both lanes), in the accumulator's lane order: the offset of the
// 16-sub-block types (Q3_K's 4, Q6_K's 32) and Q2_K's mins.
inline __m256i scaled_bsums(const __m256i sc[2], const __m256i bs[2]) {
    return _mm256_add_epi32(_mm256_madd_epi16(sc[0], bs[0]), _mm256_madd_epi16(sc[1], bs[1]));
}

// Q6_K's pair: 16 + 416 p in the packed block.
struct PackedQ6K {
    static constexpr size_t kBlock = kQ6_KBlock;
    static constexpr size_t kFirstPair = 16, kPair = 416;
    static constexpr bool kMins = false;
    // acc[c] = the pair's 8 rows' integer sums against activation row c (bs[c]: its bsums, 0-7 and
    // 8-15 in both lanes); mins unused.
    template <int C>
    static void pair(const uint8_t* pair, const BlockQ8_K* const* y, const __m256i bs[][2], __m256i acc[C],
                     __m256i* /*mins*/) {
        const __m256i sc[2] = {_mm256_cvtepi8_epi16(load128(pair)), _mm256_cvtepi8_epi16(load128(pair + 16))};
        q6_k_pair<C>(pair + 32, pair + 288, sc, y, acc, std::make_integer_sequence<int, 16>{});
        // the 32 of q - 32
        for (int c = 0; c < C; ++c) acc[c] = _mm256_sub_epi32(acc[c], _mm256_slli_epi32(scaled_bsums(sc, bs[c]), 5));
    }
};

// Q4_K's 6-bit scales and mins of rows 0-7 from the three gathered 4-byte units (lane r: row r):
// per pair p, [row p's 8 | row p + 4's 8] as 16-bit lanes (gguf_blocks.h's unpack_scale_min_k4,
// four bytes at a time).
inline void q4_k_scales(const uint8_t* packed, __m256i sc[4], __m256i mins[4]) {
    const __m256i w0 = load256(packed);
    const __m256i w1 = load256(packed + 32);
    const __m256i w2 = load256(packed + 64);
    const __m256i m6 = _mm256_set1_epi8(0x3f);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i top = _mm256_set1_epi8(0x30);
    const __m256i sc_lo = _mm256_and_si256(w0, m6);
    const __m256i m_lo = _mm256_and_si256(w1, m6);
    const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(w2, m4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), top));
    const __m256i m_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi32(w1, 2), top));
    const auto split = [](__m256i lo, __m256i hi, __m256i out[4]) {
        // qwords: rows 0, 1 | 4, 5 and rows 2, 3 | 6, 7; then pairs (0, 4), (1, 5) and (2, 6), (3, 7)
        const __m256i a = _mm256_permute4x64_epi64(_mm256_unpacklo_epi32(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
        const __m256i b = _mm256_permute4x64_epi64(_mm256_unpackhi_epi32(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
        out[0] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(a));
        out[1] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(a, 1));
        out[2] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(b));
        out[3] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(b, 1));
    };
    split(sc_lo, sc_hi, sc);
    split(m_lo, m_hi, mins);
}

// Bit `from` of each byte moved to bit 4 (16-bit shifts: what crosses a byte is masked off).
template <int From>
inline __m256i bit_to_4(__m256i v) {
    __m256i moved;
    if constexpr (From < 4) {
        moved = _mm256_slli_epi16(v, 4 - From);
    } else if constexpr (From > 4) {
        moved = _mm256_srli_epi16(v, From - 4);
    } else {
        moved = v;
    }
    return _mm256_and_si256(moved, _mm256_set1_epi8(0x10));
}

// Sub-blocks 2 T and 2 T + 1 of a Q4_K / Q5_K pair: qs chunks 2 T (elements 64 T + l) and 2 T + 1
// (64 T + 16 + l) hold sub-block 2 T in their low nibbles and 2 T + 1 (+ 32) in their high ones;
// Q5_K's fifth bits are bits 2 T and 2 T + 1 of qh chunks 0 (l < 16) and 1.
template <int C, bool kFive, int T>
inline void k4_sub_blocks(const uint8_t* qs, const uint8_t* qh, __m256i sc, const BlockQ8_K* const* y, __m256i acc[C]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v0 = load256(qs + 64 * T);
    const __m256i v1 = load256(qs + 64 * T + 32);
    __m256i lo0 = _mm256_and_si256(v0, m4);
    __m256i lo1 = _mm256_and_si256(v1, m4);
    __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
    __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
    if constexpr (kFive) {
        const __m256i h0 = load256(qh);
        const __m256i h1 = load256(qh + 32);
        lo0 = _mm256_or_si256(lo0, bit_to_4<2 * T>(h0));
        lo1 = _mm256_or_si256(lo1, bit_to_4<2 * T>(h1));
        hi0 = _mm256_or_si256(hi0, bit_to_4<2 * T + 1>(h0));
        hi1 = _mm256_or_si256(hi1, bit_to_4<2 * T + 1>(h1));
    }
    const __m256i sc_lo = broadcast16(sc, 2 * T);
    const __m256i sc_hi = broadcast16(sc, 2 * T + 1);
    for (int c = 0; c < C; ++c) {
        const int8_t* q8 = y[c]->qs + 64 * T;
        // <= 2 * 2 * 31 * 128 = 15872 per 16-bit lane
        const __m256i plo = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, broadcast128(q8)),
                                             _mm256_maddubs_epi16(lo1, broadcast128(q8 + 16)));
        const __m256i phi = _mm256_add_epi16(_mm256_maddubs_epi16(hi0, broadcast128(q8 + 32)),
                                             _mm256_maddubs_epi16(hi1, broadcast128(q8 + 48)));
        acc[c] =
            _mm256_add_epi32(_mm256_add_epi32(acc[c], _mm256_madd_epi16(plo, sc_lo)), _mm256_madd_epi16(phi, sc_hi));
        // The empty asm keeps each sum in its register in this order: GCC otherwise reassociated
        // the pair's 8 products per row into a tree whose partial sums went to the stack (the
        // tile, 64 rows x [384, 1024] on Zen5 at avx2: 25 -> 29.5 MACs a cycle).
        __asm__("" : "+x"(acc[c]));
    }
}

template <int C, bool kFive, int... T>
inline void k4_pair(const uint8_t* qs, const uint8_t* qh, __m256i sc, const BlockQ8_K* const* y, __m256i acc[C],
                    std::integer_sequence<int, T...> /*sub-block pairs*/) {
    (k4_sub_blocks<C, kFive, T>(qs, qh, sc, y, acc), ...);
}

// Q4_K (kFive false) / Q5_K: y = d * sc_j * q - dmin * m_j, 8 sub-blocks of 32 (gguf_blocks.h).
// Packed: d at 0, dmin at 16, the scale units at 32, then pair p at 128 + kPair p: Q5_K's qh (2
// chunks of 16) and the qs (8 chunks).
template <bool kFive, int C>
void tile_k4(int64_t nb, int rows, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
    constexpr size_t kBlock = kGgufPackRows * (kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
    constexpr size_t kPair = kFive ? 320 : 256;
    constexpr size_t kQs = kFive ? 64 : 0;
    __m256 sum[C];
    for (int c = 0; c < C; ++c) sum[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pb = w + static_cast<size_t>(b) * kBlock;
        prefetch_ahead(pb, kBlock);
        const BlockQ8_K* y[C];
        __m256i pair_bsums[C];  // bsums 2 j + bsums 2 j + 1, j = 0-7, in both lanes
        for (int c = 0; c < C; ++c) {
            y[c] = reinterpret_cast<const BlockQ8_K*>(a[c]) + b;
            pair_bsums[c] = _mm256_broadcastsi128_si256(_mm_hadd_epi16(load128(y[c]->bsums), load128(y[c]->bsums + 8)));
        }
        __m256i sc[4];
        __m256i mins[4];
        q4_k_scales(pb + 32, sc, mins);
        __m256i s[C][4];
        __m256i s_min[C][4];
        for (int p = 0; p < 4; ++p) {
            const uint8_t* pair = pb + 128 + kPair * p;
            __m256i acc[C];
            for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_si256();
            // The activation rows are the same for every pair: GCC hoisted their 64 broadcasts out
            // of this loop, which 16 registers cannot hold, so they went to the stack and were read
            // back. Through the empty asm the pointers are new to it each pair (22 -> 25 MACs a
            // cycle, as below); the unrolled loop of the AVX-512 tile measured slower here.
            const BlockQ8_K* yp[C];
            for (int c = 0; c < C; ++c) {
                yp[c] = y[c];
                __asm__("" : "+r"(yp[c]));
            }
            k4_pair<C, kFive>(pair + kQs, pair, sc[p], yp, acc, std::make_integer_sequence<int, 4>{});
            for (int c = 0; c < C; ++c) {
                s[c][p] = acc[c];
                s_min[c][p] = _mm256_madd_epi16(mins[p], pair_bsums[c]);
            }
        }
        const __m256 dw = load_f16x8(pb);
        const __m256 dmin = load_f16x8(pb + 16);
        for (int c = 0; c < C; ++c) {
            const __m256 yd = _mm256_set1_ps(y[c]->d);
            sum[c] =
                _mm256_add_ps(sum[c], _mm256_mul_ps(_mm256_mul_ps(dw, yd), _mm256_cvtepi32_ps(rows_of_pairs(s[c]))));
            sum[c] = _mm256_sub_ps(sum[c],
                                   _mm256_mul_ps(_mm256_mul_ps(dmin, yd), _mm256_cvtepi32_ps(rows_of_pairs(s_min[c]))));
        }
    }
    store_rows<C>(sum, rows, out, ldo);
}

// Q2_K and Q3_K: q 2 bits, sub-block J = 8 H + 2 S + t (16 elements from 128 H + 32 S + 16 t) at
// bits 2 S of qs chunk 2 H + t; Q3_K's high bit at bit 4 H + S of hmask chunk t. Packed, pair p:
// Q2_K at 32 + 160 p, its 16 scale bytes ([row p 0-7 | row p + 4 0-7][8-15 | 8-15]) then qs (4
// chunks); Q3_K at 16 + 216 p, its scale units (q3_k_pair_scales), hmask (2 chunks), qs.
template <bool kThree, int C, int J>
inline void q23_k_sub_block(const uint8_t* qs, const uint8_t* hmask, const __m256i sc[2], const BlockQ8_K* const* y,
                            __m256i acc[C]) {
    constexpr int H = J / 8;
    constexpr int S = (J % 8) / 2;
    constexpr int t = J % 2;
    const __m256i v = load256(qs + 32 * (2 * H + t));
    __m256i q = _mm256_and_si256(S == 0 ? v : _mm256_srli_epi16(v, 2 * S), _mm256_set1_epi8(3));
    if constexpr (kThree) {  // bit 4 H + S of the hmask byte to bit 2
        constexpr int from = 4 * H + S;
        const __m256i hm = load256(hmask + 32 * t);
        const __m256i moved = from > 2 ? _mm256_srli_epi16(hm, from - 2) : _mm256_slli_epi16(hm, 2 - from);
        q = _mm256_or_si256(q, _mm256_and_si256(moved, _mm256_set1_epi8(4)));
    }
    const __m256i scale = broadcast16(sc[H], J % 8);
    for (int c = 0; c < C; ++c) {
        const __m256i p16 = _mm256_maddubs_epi16(q, broadcast128(y[c]->qs + 16 * J));
        acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(p16, scale));
        __asm__("" : "+x"(acc[c]));  // in order, in its register (k4_sub_blocks says why)
    }
}

template <bool kThree, int C, int... J>
inline void q23_k_pair(const uint8_t* qs, const uint8_t* hmask, const __m256i sc[2], const BlockQ8_K* const* y,
                       __m256i acc[C], std::integer_sequence<int, J...> /*sub-blocks*/) {
    (q23_k_sub_block<kThree, C, J>(qs, hmask, sc, y, acc), ...);
}

// Q3_K's 16 scales of rows p and p + 4 minus 32, 16-bit: sc[0] [row p 0-7 | row p + 4 0-7], sc[1]
// the same for 8-15; from the pair's 4-byte units [row p 0 | row p + 4 0 | row p 1 | row p + 4 1 |
// row p 2 | row p + 4 2] (scale j's low nibble in unit 0 (j < 4, j 8-11: high nibble) or 1 (j
// 4-7, 12-15) byte j % 4, its top 2 bits in unit 2 byte j % 4 at bits 2 (j / 4)).
inline void q3_k_pair_scales(const uint8_t* pair, __m256i sc[2]) {
    const __m256i x = load256(pair);
    const __m256i lows = _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 2, 1, 3, 0, 2, 1, 3));
    const __m256i highs = _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(4, 4, 5, 5, 4, 4, 5, 5));
    const __m256i low =
        _mm256_and_si256(_mm256_srlv_epi32(lows, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
    const __m256i high =
        _mm256_and_si256(_mm256_srlv_epi32(highs, _mm256_setr_epi32(0, 2, 0, 2, 4, 6, 4, 6)), _mm256_set1_epi8(0x03));
    const __m256i sc8 = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
    const __m256i k32 = _mm256_set1_epi16(32);
    sc[0] = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(sc8)), k32);
    sc[1] = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(sc8, 1)), k32);
}

// Q2_K's pair (32 + 160 p, d and dmin before): y = d (sc_j & 15) q - dmin (sc_j >> 4); mins[c]
// gets sum_j m_j * bsums_j.
struct PackedQ2K {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ2_K);
    static constexpr size_t kFirstPair = 32, kPair = 160;
    static constexpr bool kMins = true;
    template <int C>
    static void pair(const uint8_t* pair, const BlockQ8_K* const* y, const __m256i bs[][2], __m256i acc[C],
                     __m256i* mins) {
        const __m128i m4 = _mm_set1_epi8(0x0F);
        __m256i sc[2];
        __m256i m[2];
        for (int h = 0; h < 2; ++h) {
            const __m128i raw = load128(pair + 16 * h);
            sc[h] = _mm256_cvtepu8_epi16(_mm_and_si128(raw, m4));
            m[h] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        }
        q23_k_pair<false, C>(pair + 32, nullptr, sc, y, acc, std::make_integer_sequence<int, 16>{});
        for (int c = 0; c < C; ++c) mins[c] = scaled_bsums(m, bs[c]);
    }
};

// Q3_K's pair (16 + 216 p): y = d (sc_j - 32) (q - 4 + 4 hbit), the 4 off through the activation sums.
struct PackedQ3K {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ3_K);
    static constexpr size_t kFirstPair = 16, kPair = 216;
    static constexpr bool kMins = false;
    template <int C>
    static void pair(const uint8_t* pair, const BlockQ8_K* const* y, const __m256i bs[][2], __m256i acc[C],
                     __m256i* /*mins*/) {
        __m256i sc[2];
        q3_k_pair_scales(pair, sc);
        q23_k_pair<true, C>(pair + 88, pair + 24, sc, y, acc, std::make_integer_sequence<int, 16>{});
        // the 4 of q - 4
        for (int c = 0; c < C; ++c) acc[c] = _mm256_sub_epi32(acc[c], _mm256_slli_epi32(scaled_bsums(sc, bs[c]), 2));
    }
};

// The 16-sub-block K-quants (W: PackedQ2K, PackedQ3K, PackedQ6K): per block, each pair's integer
// sums (W::pair), then the reference's f32 steps, sum += (d_w * d_a) * isum and, with mins (Q2_K,
// dmin at 16), sum -= (dmin_w * d_a) * isum_min.
template <class W, int C>
void tile_k16(int64_t nb, int rows, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
    __m256 sum[C];
    for (int c = 0; c < C; ++c) sum[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pb = w + static_cast<size_t>(b) * W::kBlock;
        prefetch_ahead(pb, W::kBlock);
        const BlockQ8_K* y[C];
        __m256i bs[C][2];  // the activation's 16 bsums, 0-7 / 8-15 in both lanes
        for (int c = 0; c < C; ++c) {
            y[c] = reinterpret_cast<const BlockQ8_K*>(a[c]) + b;
            bs[c][0] = broadcast128(y[c]->bsums);
            bs[c][1] = broadcast128(y[c]->bsums + 8);
        }
        __m256i s[C][4];
        __m256i s_min[C][4];
        for (int p = 0; p < 4; ++p) {
            __m256i acc[C];
            __m256i mins[C];
            for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_si256();
            // The activation loads kept in this loop, as tile_k4's (with the sums in order, the
            // Q2_K / Q3_K / Q6_K tiles ran 1.2-1.5x on Zen5 at avx2).
            const BlockQ8_K* yp[C];
            for (int c = 0; c < C; ++c) {
                yp[c] = y[c];
                __asm__("" : "+r"(yp[c]));
            }
            W::template pair<C>(pb + W::kFirstPair + W::kPair * p, yp, bs, acc, mins);
            for (int c = 0; c < C; ++c) {
                s[c][p] = acc[c];
                if constexpr (W::kMins) s_min[c][p] = mins[c];
            }
        }
        const __m256 dw = load_f16x8(pb);
        for (int c = 0; c < C; ++c) {
            const __m256 yd = _mm256_set1_ps(y[c]->d);
            sum[c] =
                _mm256_add_ps(sum[c], _mm256_mul_ps(_mm256_mul_ps(dw, yd), _mm256_cvtepi32_ps(rows_of_pairs(s[c]))));
            if constexpr (W::kMins) {
                const __m256 dmin = load_f16x8(pb + 16);
                sum[c] = _mm256_sub_ps(
                    sum[c], _mm256_mul_ps(_mm256_mul_ps(dmin, yd), _mm256_cvtepi32_ps(rows_of_pairs(s_min[c]))));
            }
        }
    }
    store_rows<C>(sum, rows, out, ldo);
}

template <int C>
GgufPackedTileFn tile_for(GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_0:
            return &tile_unsigned32<PackedQ4_0, C>;
        case GgmlType::kQ5_0:
            return &tile_unsigned32<PackedQ5_0, C>;
        case GgmlType::kQ4_1:
            return &tile_unsigned32<PackedQ4_1, C>;
        case GgmlType::kQ5_1:
            return &tile_unsigned32<PackedQ5_1, C>;
        case GgmlType::kMXFP4:
            return &tile_unsigned32<PackedMxfp4, C>;
        case GgmlType::kQ8_0:
            return &tile_q8_0<C>;
        case GgmlType::kQ2_K:
            return &tile_k16<PackedQ2K, C>;
        case GgmlType::kQ3_K:
            return &tile_k16<PackedQ3K, C>;
        case GgmlType::kQ4_K:
            return &tile_k4<false, C>;
        case GgmlType::kQ5_K:
            return &tile_k4<true, C>;
        case GgmlType::kQ6_K:
            return &tile_k16<PackedQ6K, C>;
        default:
            return nullptr;
    }
}

}  // namespace

GgufPackedTileFn gguf_packed_tile_avx2(GgmlType type, int cols) {
    return tile_for_cols(cols, [type](auto c) { return tile_for<decltype(c)::value>(type); });
}

}  // namespace moeserve::kernels::cpu::detail
