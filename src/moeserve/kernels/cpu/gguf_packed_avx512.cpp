// AVX-512 VNNI kernels on packed GGUF groups (gguf_packed.h): 8 weight rows times 1-4 activation
// rows. A 512-bit load of a packed block holds 16-byte chunks of two rows: two pairs' chunks for
// Q4_0 / Q4_1 / Q5_0 / Q5_1 ([row p | row p + 4 | row p + 1 | row p + 5]), or two consecutive chunks of one pair
// for Q8_0 and the K-quants ([row p k | row p + 4 k | row p k + 1 | row p + 4 k + 1]); the
// activation rows come prepared to match (gguf_prepare_packed_q8x2 / q8kx2), so each product is
// one load and one vpdpbusd (vpmaddubsw + vpdpwssd with the K-quants' sub-block scales) into
// int32 lanes of their row. The unsigned weights' offset comes off through the activation sums
// (Q8_0's signed bytes are flipped to q + 128), exact in int32. At the end of a block the lanes
// are summed per row (lane_sums4) into each row's exact integer sum, and each f32 lane runs the
// reference's operations for its row, as the AVX2 kernels do: every result has gguf_vec_dot_ref's
// bits (this file is built with -ffp-contract=off). Two activation rows share one 16-lane f32
// register ([row c | row c + 1]).
// AVX-512 F/BW/VL/DQ + VNNI code.
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_packed_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
// The 8 rows' f16 scales at p, as f32 twice: [rows 0-7 | rows 0-7].
inline __m512 load_f16x8_twice(const uint8_t* p) {
    const __m256 d = _mm256_cvtph_ps(load128(p));
    return _mm512_insertf32x8(_mm512_castps256_ps512(d), d, 1);
}
inline __m512 pair_ps(float lo, float hi) { return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1); }
inline __m512i pair_epi32(int32_t lo, int32_t hi) {
    return _mm512_inserti64x4(_mm512_set1_epi32(lo), _mm256_set1_epi32(hi), 1);
}

// Lane j (128 bits) of the result: [the sum of q0's lane j, q1's, q2's, q3's].
inline __m512i lane_sums4(__m512i q0, __m512i q1, __m512i q2, __m512i q3) {
    const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(q0, q1), _mm512_unpackhi_epi32(q0, q1));
    const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(q2, q3), _mm512_unpackhi_epi32(q2, q3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// Four accumulators of pairs 0-3 whose lanes are [row p | row p + 4 | row p | row p + 4] -> the
// 8 rows' sums in order.
inline __m256i rows_of_pairs(const __m512i s[4]) {
    const __m512i l = lane_sums4(s[0], s[1], s[2], s[3]);  // lanes: rows 0-3, 4-7, 0-3, 4-7
    return _mm256_add_epi32(_mm512_castsi512_si256(l), _mm512_extracti64x4_epi64(l, 1));
}

inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// 16-bit element e (0-7) of each 128-bit lane in all of that lane's 16-bit elements.
inline __m512i broadcast16(__m512i v, int e) {
    return _mm512_shuffle_epi8(v, _mm512_set1_epi16(static_cast<short>((2 * e + 1) << 8 | 2 * e)));
}

// As the AVX2 kernels: the packed bytes 2 KiB (at least two blocks) further on into L1. (No
// std::max: this file calls no inline std code, matmul_tile_isa.h says why.)
inline constexpr size_t kPrefetchBytes = 2048;
template <size_t kBytes>
inline void prefetch_ahead(const uint8_t* block) {
    constexpr size_t kAhead = 2 * kBytes > kPrefetchBytes ? 2 * kBytes : kPrefetchBytes;
    for (size_t i = 0; i < kBytes; i += 64)
        _mm_prefetch(reinterpret_cast<const char*>(block + kAhead + i), _MM_HINT_T0);
}

// sum[c / 2] holds activation rows c and c + 1 ([c | c + 1]).
template <int C>
inline void store_rows(const __m512 sum[(C + 1) / 2], int rows, float* out, int64_t ldo) {
    for (int c = 0; c < C; ++c) {
        alignas(64) float tmp[2 * kGgufPackRows];
        _mm512_store_ps(tmp, sum[c / 2]);
        std::memcpy(out + c * ldo, tmp + kGgufPackRows * (c % 2), sizeof(float) * static_cast<size_t>(rows));
    }
}

// ---- The 32-element types (q8_0 activations as GgufPackedQ8x2Block) ----

// Q4_0 / Q4_1 / Q5_0 / Q5_1: the unsigned weight bytes of pairs (0, 1) and (2, 3), elements 0-15 (lo) and 16-31
// (hi): lanes [row p | row p + 4 | row p + 1 | row p + 5].
struct Quads {
    __m512i lo[2], hi[2];
};

// The nibbles of the packed qs (pairs 0, 1 at 0, pairs 2, 3 at 64).
inline void nibble_quads(const uint8_t* qs, Quads& q) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int g = 0; g < 2; ++g) {
        const __m512i v = load512(qs + 64 * g);
        q.lo[g] = _mm512_and_si512(v, m4);
        q.hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
}

// The 5-bit values of the gathered qh (row r's 32 fifth bits at 4 r) and the packed qs: the
// fifth bits as byte masks in the quads' lane order: 16-bit halves [row 0, 4, 1, 5] of bits 0-15
// (lo of pairs 0, 1), of bits 16-31 (hi), then the same for rows 2, 6, 3, 7.
inline void five_bit_quads(const uint8_t* qh, const uint8_t* qs, Quads& q) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i fifth = _mm512_set1_epi8(0x10);
    const __m256i halves =
        _mm256_permutexvar_epi16(_mm256_setr_epi16(0, 8, 2, 10, 1, 9, 3, 11, 4, 12, 6, 14, 5, 13, 7, 15),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)));
    alignas(32) uint64_t masks[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(masks), halves);
    for (int g = 0; g < 2; ++g) {
        const __m512i v = load512(qs + 64 * g);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        q.lo[g] = _mm512_mask_add_epi8(lo, _cvtu64_mask64(masks[2 * g]), lo, fifth);
        q.hi[g] = _mm512_mask_add_epi8(hi, _cvtu64_mask64(masks[2 * g + 1]), hi, fifth);
    }
}

// Q4_0 (q - 8) and Q5_0 (q - 16): the offset comes off through the activation sum. Q4_1 and Q5_1
// (y = d q + m): no offset, and m times the activation sum (kMin). Packed: d at 0, m (kMin) at
// 16, then qh (the 5-bit types), then qs.
struct PackedQ4_0 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ4_0);
    static constexpr int kOffset = 8;  // q - 8
    static constexpr bool kMin = false;
    static __m512 scales(const uint8_t* pb) { return load_f16x8_twice(pb); }
    static void quads(const uint8_t* pb, Quads& q) { nibble_quads(pb + 16, q); }
};

struct PackedQ4_1 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ4_1);
    static constexpr bool kMin = true;
    static __m512 scales(const uint8_t* pb) { return load_f16x8_twice(pb); }
    static void quads(const uint8_t* pb, Quads& q) { nibble_quads(pb + 32, q); }
};

struct PackedQ5_0 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ5_0);
    static constexpr int kOffset = 16;  // q - 16
    static constexpr bool kMin = false;
    static __m512 scales(const uint8_t* pb) { return load_f16x8_twice(pb); }
    static void quads(const uint8_t* pb, Quads& q) { five_bit_quads(pb + 16, pb + 48, q); }
};

// 2^(e - 128) for the 8 rows' e8m0 scales gathered at p, twice ([rows 0-7 | rows 0-7]):
// e8m0_to_f32_half's bits (e 0 and 1 the subnormals 2^-128 and 2^-127).
inline __m512 e8m0_half_x8_twice(const uint8_t* p) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __mmask8 below_2 = _mm256_cmplt_epu32_mask(e, _mm256_set1_epi32(2));
    const __m256 d = _mm256_castsi256_ps(_mm256_mask_blend_epi32(below_2, normal, subnormal));
    return _mm512_insertf32x8(_mm512_castps256_ps512(d), d, 1);
}

// MXFP4: the nibbles index the doubled e2m1 values plus 12 (0-24, unsigned for vpdpbusd), 12 off
// through the activation sum; the e8m0 scales gathered at 0, qs at 8.
struct PackedMxfp4 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockMXFP4);
    static constexpr int kOffset = 12;
    static constexpr bool kMin = false;
    static __m512 scales(const uint8_t* pb) { return e8m0_half_x8_twice(pb); }
    static void quads(const uint8_t* pb, Quads& q) {
        const __m512i values =
            _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
        nibble_quads(pb + 8, q);
        for (int g = 0; g < 2; ++g) {
            q.lo[g] = _mm512_shuffle_epi8(values, q.lo[g]);
            q.hi[g] = _mm512_shuffle_epi8(values, q.hi[g]);
        }
    }
};

struct PackedQ5_1 {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ5_1);
    static constexpr bool kMin = true;
    static __m512 scales(const uint8_t* pb) { return load_f16x8_twice(pb); }
    static void quads(const uint8_t* pb, Quads& q) { five_bit_quads(pb + 32, pb + 64, q); }
};

// Quads' accumulators of activation rows c (a0, a1) and c + 1 (b0, b1) -> [c | c + 1], rows in order.
inline __m512i rows_of_quads(__m512i a0, __m512i a1, __m512i b0, __m512i b1) {
    // lane j of lane_sums4: [a0 j, a1 j, b0 j, b1 j]; a0's lanes are rows 0, 4, 1, 5, a1's 2, 6, 3, 7
    const __m512i idx = _mm512_setr_epi32(0, 8, 1, 9, 4, 12, 5, 13, 2, 10, 3, 11, 6, 14, 7, 15);
    return _mm512_permutexvar_epi32(idx, lane_sums4(a0, a1, b0, b1));
}

template <class W, int C>
void tile_unsigned32(int64_t nb, int rows, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
    constexpr int kPairs = (C + 1) / 2;
    __m512 sum[kPairs];
    for (int k = 0; k < kPairs; ++k) sum[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pb = w + static_cast<size_t>(b) * W::kBlock;
        prefetch_ahead<W::kBlock>(pb);
        const __m512 dw = W::scales(pb);
        Quads q;
        W::quads(pb, q);
        for (int k = 0; k < kPairs; ++k) {
            __m512i acc[2][2] = {};  // [activation row c + i][pairs 01, 23]
            float yd[2] = {0, 0};
            int32_t ysum[2] = {0, 0};
            for (int i = 0; i < 2 && 2 * k + i < C; ++i) {
                const auto& y = reinterpret_cast<const GgufPackedQ8x2Block*>(a[2 * k + i])[b];
                const __m512i ylo = _mm512_broadcast_i32x4(load128(y.qs));
                const __m512i yhi = _mm512_broadcast_i32x4(load128(y.qs + 32));
                for (int g = 0; g < 2; ++g) {
                    acc[i][g] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[i][g], q.lo[g], ylo), q.hi[g], yhi);
                }
                yd[i] = y.d;
                ysum[i] = y.sum;
            }
            const __m512i qa = rows_of_quads(acc[0][0], acc[0][1], acc[1][0], acc[1][1]);
            const __m512 d = _mm512_mul_ps(dw, pair_ps(yd[0], yd[1]));
            if constexpr (W::kMin) {  // the reference's (d_w d_a) isum + (m d_a) asum
                const __m512 dm = _mm512_mul_ps(load_f16x8_twice(pb + 16), pair_ps(yd[0], yd[1]));
                const __m512 asum = pair_ps(static_cast<float>(ysum[0]), static_cast<float>(ysum[1]));
                const __m512 with_min =
                    _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(qa)), _mm512_mul_ps(dm, asum));
                sum[k] = _mm512_add_ps(sum[k], with_min);
            } else {
                const __m512i isum = _mm512_sub_epi32(qa, pair_epi32(ysum[0] * W::kOffset, ysum[1] * W::kOffset));
                sum[k] = _mm512_add_ps(sum[k], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
            }
        }
    }
    store_rows<C>(sum, rows, out, ldo);
}

// Q8_0: pair p's 64 bytes at 16 + 64 p are [row p 0-15 | row p + 4 0-15 | row p 16-31 | row p + 4
// 16-31]; the signed bytes go in as q + 128.
template <int C>
void tile_q8_0(int64_t nb, int rows, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
    constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ8_0);
    constexpr int kPairs = (C + 1) / 2;
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512 sum[kPairs];
    for (int k = 0; k < kPairs; ++k) sum[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pb = w + static_cast<size_t>(b) * kBlock;
        prefetch_ahead<kBlock>(pb);
        const __m512 dw = load_f16x8_twice(pb);
        __m512i x[4];
        for (int p = 0; p < 4; ++p) x[p] = _mm512_xor_si512(load512(pb + 16 + 64 * p), flip);
        for (int k = 0; k < kPairs; ++k) {
            __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            float yd[2] = {0, 0};
            for (int i = 0; i < 2 && 2 * k + i < C; ++i) {
                const auto& y = reinterpret_cast<const GgufPackedQ8x2Block*>(a[2 * k + i])[b];
                const __m512i yv = load512(y.qs);
                __m512i s[4];
                for (int p = 0; p < 4; ++p) s[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x[p], yv);
                isum[i] = _mm256_sub_epi32(rows_of_pairs(s), _mm256_set1_epi32(y.sum << 7));
                yd[i] = y.d;
            }
            const __m512 d = _mm512_mul_ps(dw, pair_ps(yd[0], yd[1]));
            sum[k] = _mm512_add_ps(sum[k], _mm512_mul_ps(d, _mm512_cvtepi32_ps(join(isum[0], isum[1]))));
        }
    }
    store_rows<C>(sum, rows, out, ldo);
}

// ---- K-quants (q8_K activations as GgufPackedQ8Kx2Block) ----

// Two activation rows' sums of the 8 rows, [c | c + 1] (i32), and of the mins (K4 only) -> f32:
// sum += (d_w * d_a) * s; sum -= (dmin_w * d_a) * s_min, each row in its lane.
struct KSums {
    __m256i s[2];
    __m256i s_min[2];
    float yd[2];
};

// Activation rows 2 k and second_of_pair<C>(k) share sum[k]; an odd last row pairs with itself
// (computed twice, stored once).
template <int C>
inline int second_of_pair(int k) {
    return 2 * k + 1 < C ? 2 * k + 1 : 2 * k;
}

// The tile's C activation blocks at block b.
template <int C>
inline void k_blocks(const uint8_t* const* a, int64_t b, const GgufPackedQ8Kx2Block* y[C]) {
    for (int c = 0; c < C; ++c) y[c] = reinterpret_cast<const GgufPackedQ8Kx2Block*>(a[c]) + b;
}

// sum += (d_w * d_a) * s for activation rows 2 k and second_of_pair<C>(k), s the 8 rows' integer
// sums of the pairs' accumulators. Returns their d_a, [2 k | second].
template <int C>
inline __m512 add_block_sums(const __m512i acc[][4], const GgufPackedQ8Kx2Block* const* y, __m512 dw, int k,
                             __m512& sum) {
    const int c0 = 2 * k;
    const int c1 = second_of_pair<C>(k);
    const __m512i s = join(rows_of_pairs(acc[c0]), rows_of_pairs(acc[c1]));
    const __m512 yd = pair_ps(y[c0]->d, y[c1]->d);
    sum = _mm512_add_ps(sum, _mm512_mul_ps(_mm512_mul_ps(dw, yd), _mm512_cvtepi32_ps(s)));
    return yd;
}

// Q4_K's 6-bit scales (sc) and mins of rows 0-7 from the three gathered 4-byte units, as 16-bit
// lanes: per pair p, sc[p] = [row p's 8 | row p + 4's 8 | row p's 8 | row p + 4's 8]; mins[0]
// rows 0-3 (a row per lane), mins[1] rows 4-7.
inline void q4_k_scales(const uint8_t* packed, __m512i sc[4], __m512i mins[2]) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + 32));
    const __m256i w2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + 64));
    const __m256i m6 = _mm256_set1_epi8(0x3f);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i top = _mm256_set1_epi8(0x30);
    // lane r of each: row r's 4 values (scales / mins 0-3, then 4-7), widened to 16 bits
    const __m512i sc_lo = _mm512_cvtepu8_epi16(_mm256_and_si256(w0, m6));
    const __m512i m_lo = _mm512_cvtepu8_epi16(_mm256_and_si256(w1, m6));
    const __m512i sc_hi = _mm512_cvtepu8_epi16(
        _mm256_or_si256(_mm256_and_si256(w2, m4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), top)));
    const __m512i m_hi = _mm512_cvtepu8_epi16(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),
                                                              _mm256_and_si256(_mm256_srli_epi32(w1, 2), top)));
    // 16-bit element l of row `row`'s 8: value s = l % 8 of it, from lo (s < 4) or hi (index + 32)
    const auto index = [](int row, int s) { return static_cast<short>((s < 4 ? 0 : 32) + 4 * row + s % 4); };
    for (int p = 0; p < 4; ++p) {
        alignas(64) short idx[32];
        for (int l = 0; l < 32; ++l) idx[l] = index(p + 4 * ((l / 8) % 2), l % 8);
        sc[p] = _mm512_permutex2var_epi16(sc_lo, load512(idx), sc_hi);
    }
    for (int h = 0; h < 2; ++h) {
        alignas(64) short idx[32];
        for (int l = 0; l < 32; ++l) idx[l] = index(4 * h + l / 8, l % 8);
        mins[h] = _mm512_permutex2var_epi16(m_lo, load512(idx), m_hi);
    }
}

// Bit From of each byte moved to bit To (16-bit shifts: what crosses a byte is masked off).
template <int From, int To>
inline __m512i bit_to(__m512i v) {
    __m512i moved;
    if constexpr (From < To) {
        moved = _mm512_slli_epi16(v, To - From);
    } else if constexpr (From > To) {
        moved = _mm512_srli_epi16(v, From - To);
    } else {
        moved = v;
    }
    return _mm512_and_si512(moved, _mm512_set1_epi8(static_cast<char>(1 << To)));
}

// Sub-blocks 2 T (low nibbles) and 2 T + 1 (high) of a Q4_K / Q5_K pair: qs chunks 2 T and 2 T + 1
// in one register (elements 64 T + l, l < 32, and + 32); Q5_K's fifth bits are bits 2 T and 2 T + 1
// of the pair's two qh chunks, one register in the same lane order.
template <int C, bool kFive, int T>
inline void k4_sub_blocks(const uint8_t* qs, __m512i qh, __m512i sc, const GgufPackedQ8Kx2Block* const* y,
                          __m512i acc[C]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = load512(qs + 64 * T);
    __m512i lo = _mm512_and_si512(v, m4);
    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if constexpr (kFive) {
        lo = _mm512_or_si512(lo, bit_to<2 * T, 4>(qh));
        hi = _mm512_or_si512(hi, bit_to<2 * T + 1, 4>(qh));
    }
    const __m512i sc_lo = broadcast16(sc, 2 * T);
    const __m512i sc_hi = broadcast16(sc, 2 * T + 1);
    for (int c = 0; c < C; ++c) {
        // <= 2 * 31 * 128 = 7936 per 16-bit lane
        const __m512i plo = _mm512_maddubs_epi16(lo, load512(y[c]->qs + 128 * T));
        const __m512i phi = _mm512_maddubs_epi16(hi, load512(y[c]->qs + 128 * T + 64));
        acc[c] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(acc[c], plo, sc_lo), phi, sc_hi);
    }
}

template <int C, bool kFive, int... T>
inline void k4_pair(const uint8_t* qs, __m512i qh, __m512i sc, const GgufPackedQ8Kx2Block* const* y, __m512i acc[C],
                    std::integer_sequence<int, T...> /*sub-block pairs*/) {
    (k4_sub_blocks<C, kFive, T>(qs, qh, sc, y, acc), ...);
}

// The mins' products of activation rows c and c + 1 (mins[0]: rows 0-3, mins[1]: rows 4-7, a row a
// lane) -> [c | c + 1], rows in order.
inline __m512i rows_of_mins(const __m512i mins[2], const __m512i pbs0, const __m512i pbs1) {
    // lane j of lane_sums4: [rows 0-3's j, rows 4-7's j] of c, then of c + 1
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_epi32(idx,
                                    lane_sums4(_mm512_madd_epi16(mins[0], pbs0), _mm512_madd_epi16(mins[1], pbs0),
                                               _mm512_madd_epi16(mins[0], pbs1), _mm512_madd_epi16(mins[1], pbs1)));
}

// Q4_K (kFive false) / Q5_K: y = d * sc_j * q - dmin * m_j, 8 sub-blocks of 32. Packed: d at 0,
// dmin at 16, the scale units at 32, then pair p at 128 + kPair p: Q5_K's qh (2 chunks of 16) and
// the qs (8 chunks).
template <bool kFive, int C>
void tile_k4(int64_t nb, int rows, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
    constexpr size_t kBlock = kGgufPackRows * (kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
    constexpr size_t kPair = kFive ? 320 : 256;
    constexpr size_t kQs = kFive ? 64 : 0;
    constexpr int kPairs = (C + 1) / 2;
    __m512 sum[kPairs];
    for (int k = 0; k < kPairs; ++k) sum[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pb = w + static_cast<size_t>(b) * kBlock;
        prefetch_ahead<kBlock>(pb);
        const GgufPackedQ8Kx2Block* y[C];
        k_blocks<C>(a, b, y);
        __m512i sc[4];
        __m512i mins[2];
        q4_k_scales(pb + 32, sc, mins);
        __m512i acc[C][4];
        // Unrolled, the pairs schedule as one stretch of code: the tile ran 1.09-1.15x the rolled
        // loop (41 -> 45-47 MACs a cycle, 64 rows through a [384, 1024] matrix, Zen5). tile_k16
        // measured a loss from the same with 4 rows, and unrolls only for one (decode).
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const uint8_t* pair = pb + 128 + kPair * p;
            __m512i pacc[C];
            for (int c = 0; c < C; ++c) pacc[c] = _mm512_setzero_si512();
            const __m512i qh = kFive ? load512(pair) : _mm512_setzero_si512();
            k4_pair<C, kFive>(pair + kQs, qh, sc[p], y, pacc, std::make_integer_sequence<int, 4>{});
            for (int c = 0; c < C; ++c) acc[c][p] = pacc[c];
        }
        const __m512 dw = load_f16x8_twice(pb);
        const __m512 dmin = load_f16x8_twice(pb + 16);
        for (int k = 0; k < kPairs; ++k) {
            const __m512 yd = add_block_sums<C>(acc, y, dw, k, sum[k]);
            const __m512i s_min =
                rows_of_mins(mins, load512(y[2 * k]->pair_bsums4), load512(y[second_of_pair<C>(k)]->pair_bsums4));
            sum[k] = _mm512_sub_ps(sum[k], _mm512_mul_ps(_mm512_mul_ps(dmin, yd), _mm512_cvtepi32_ps(s_min)));
        }
    }
    store_rows<C>(sum, rows, out, ldo);
}

// The 16-sub-block types' (Q2_K, Q3_K, Q6_K) scales of one pair for the register of sub-blocks
// 8 h + 2 R and + 1: sc_h holds [row p | row p + 4] scales 8 h .. 8 h + 7 (16-bit) twice; lanes 0,
// 1 get scale 2 R of their row, lanes 2, 3 scale 2 R + 1.
template <int R>
inline __m512i sub_block_pair_scales(__m512i sc_h) {
    constexpr int e0 = 2 * R;
    constexpr int e1 = 2 * R + 1;
    const __m512i pick = join(_mm256_set1_epi16(static_cast<short>((2 * e0 + 1) << 8 | 2 * e0)),
                              _mm256_set1_epi16(static_cast<short>((2 * e1 + 1) << 8 | 2 * e1)));
    return _mm512_shuffle_epi8(sc_h, pick);
}

// sc_h of sub_block_pair_scales for h = 0, 1, from a pair's 16-bit scales [row p 0-7 | row p + 4
// 0-7 | row p 8-15 | row p + 4 8-15].
inline void scale_halves(__m512i sc, __m512i sc_h[2]) {
    sc_h[0] = _mm512_shuffle_i64x2(sc, sc, _MM_SHUFFLE(1, 0, 1, 0));
    sc_h[1] = _mm512_shuffle_i64x2(sc, sc, _MM_SHUFFLE(3, 2, 3, 2));
}

// Q6_K: y = d * sc_j * (q - 32), 16 sub-blocks of 16. Packed: d at 0, then pair p at 16 + 416 p:
// its scales ([row p 0-7 | row p + 4 0-7 | row p 8-15 | row p + 4 8-15]), ql at + 32 (8 chunks)
// and qh at + 288 (4 chunks). Sub-blocks J = 8 h + 2 r and J + 1 are one register: ql chunks
// 4 h + 2 (r % 2) and + 1 (nibble r / 2), qh chunks 2 h and 2 h + 1 (bits 2 r, 2 r + 1), against
// activation window 4 h + r.
template <int C, int H, int R>
inline void q6_k_sub_blocks(const uint8_t* ql, const __m512i qh[2], __m512i sc_h, const GgufPackedQ8Kx2Block* const* y,
                            __m512i acc[C]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i l = load512(ql + 32 * (4 * H + 2 * (R % 2)));
    const __m512i low = _mm512_and_si512(R < 2 ? l : _mm512_srli_epi16(l, 4), m4);
    __m512i high;  // bits 2 R, 2 R + 1 to bits 4, 5
    if constexpr (R == 0) {
        high = _mm512_slli_epi16(qh[H], 4);
    } else if constexpr (R == 1) {
        high = _mm512_slli_epi16(qh[H], 2);
    } else if constexpr (R == 2) {
        high = qh[H];
    } else {
        high = _mm512_srli_epi16(qh[H], 2);
    }
    const __m512i q = _mm512_or_si512(low, _mm512_and_si512(high, _mm512_set1_epi8(0x30)));
    const __m512i scale = sub_block_pair_scales<R>(sc_h);
    for (int c = 0; c < C; ++c) {
        // <= 2 * 63 * 128 = 16128 per 16-bit lane
        const __m512i p16 = _mm512_maddubs_epi16(q, load512(y[c]->qs + 64 * (4 * H + R)));
        acc[c] = _mm512_dpwssd_epi32(acc[c], p16, scale);
    }
}

template <int C, int... HR>
inline void q6_k_pair(const uint8_t* ql, const __m512i qh[2], const __m512i sc_h[2],
                      const GgufPackedQ8Kx2Block* const* y, __m512i acc[C], std::integer_sequence<int, HR...> /*h r*/) {
    (q6_k_sub_blocks<C, HR / 4, HR % 4>(ql, qh, sc_h[HR / 4], y, acc), ...);
}

// sum_j sc_j * bsums_j of a row pair's 16 scales (sub_block_pair_scales' order, 16-bit) and an
// activation's bsums, in the accumulator's lane order: the offset of the 16-sub-block types
// (Q3_K's 4, Q6_K's 32) and Q2_K's mins.
inline __m512i scaled_bsums(__m512i sc, const GgufPackedQ8Kx2Block* y) {
    return _mm512_madd_epi16(sc, load512(y->bsums2));
}

// Q6_K's pair: 16 + 416 p in the packed block.
struct PackedQ6K {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ6_K);
    static constexpr size_t kFirstPair = 16, kPair = 416;
    static constexpr bool kMins = false;
    template <int C>
    static void pair(const uint8_t* pair, const GgufPackedQ8Kx2Block* const* y, __m512i acc[C], __m512i* /*mins*/) {
        const __m512i sc = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair)));
        __m512i sc_h[2];
        scale_halves(sc, sc_h);
        const __m512i qh[2] = {load512(pair + 288), load512(pair + 288 + 64)};
        q6_k_pair<C>(pair + 32, qh, sc_h, y, acc, std::make_integer_sequence<int, 8>{});
        // the 32 of q - 32
        for (int c = 0; c < C; ++c) acc[c] = _mm512_sub_epi32(acc[c], _mm512_slli_epi32(scaled_bsums(sc, y[c]), 5));
    }
};

// Q2_K: y = d (sc_j & 15) q - dmin (sc_j >> 4), q 2 bits, 16 sub-blocks of 16. Packed: d at 0,
// dmin at 16, then pair p at 32 + 160 p: its scales (bytes, in sub_block_pair_scales' order) and qs
// at + 32 (4 chunks). Chunks 2 H and 2 H + 1 are one register, whose bits 2 S, 2 S + 1 are
// sub-blocks 8 H + 2 S and + 1 (elements 128 H + 32 S ..), against activation window 4 H + S.
template <int C, int HS>
inline void q2_k_sub_blocks(const __m512i v[2], const __m512i sc_h[2], const GgufPackedQ8Kx2Block* const* y,
                            __m512i acc[C]) {
    constexpr int H = HS / 4;
    constexpr int S = HS % 4;
    const __m512i q = _mm512_and_si512(S == 0 ? v[H] : _mm512_srli_epi16(v[H], 2 * S), _mm512_set1_epi8(3));
    const __m512i scale = sub_block_pair_scales<S>(sc_h[H]);
    for (int c = 0; c < C; ++c) {
        // <= 2 * 3 * 128 = 768 per 16-bit lane
        const __m512i p16 = _mm512_maddubs_epi16(q, load512(y[c]->qs + 64 * (4 * H + S)));
        acc[c] = _mm512_dpwssd_epi32(acc[c], p16, scale);
    }
}

template <int C, int... HS>
inline void q2_k_pair(const __m512i v[2], const __m512i sc_h[2], const GgufPackedQ8Kx2Block* const* y, __m512i acc[C],
                      std::integer_sequence<int, HS...> /*h s*/) {
    (q2_k_sub_blocks<C, HS>(v, sc_h, y, acc), ...);
}

// Q2_K's pair: 32 + 160 p in the packed block (d, dmin before); mins[c] gets sum_j m_j * bsums_j.
struct PackedQ2K {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ2_K);
    static constexpr size_t kFirstPair = 32, kPair = 160;
    static constexpr bool kMins = true;
    template <int C>
    static void pair(const uint8_t* pair, const GgufPackedQ8Kx2Block* const* y, __m512i acc[C], __m512i* mins) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair));
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m512i sc = _mm512_cvtepu8_epi16(_mm256_and_si256(raw, m4));
        const __m512i m = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
        __m512i sc_h[2];
        scale_halves(sc, sc_h);
        const __m512i v[2] = {load512(pair + 32), load512(pair + 96)};
        q2_k_pair<C>(v, sc_h, y, acc, std::make_integer_sequence<int, 8>{});
        for (int c = 0; c < C; ++c) mins[c] = scaled_bsums(m, y[c]);
    }
};

// Q3_K's 16 scales of rows p and p + 4 minus 32, 16-bit in sub_block_pair_scales' order, from the
// pair's interleaved 4-byte units [row p 0 | row p + 4 0 | row p 1 | row p + 4 1 | row p 2 | row
// p + 4 2]: scale j's low nibble is unit 0 (j < 4, j 8-11: high nibble) or unit 1 (j 4-7, 12-15)
// byte j % 4, its top 2 bits unit 2 byte j % 4 at bits 2 (j / 4).
inline __m512i q3_k_pair_scales(const uint8_t* pair) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair));
    const __m256i lows = _mm256_permutexvar_epi32(_mm256_setr_epi32(0, 2, 1, 3, 0, 2, 1, 3), x);
    const __m256i highs = _mm256_permutexvar_epi32(_mm256_setr_epi32(4, 4, 5, 5, 4, 4, 5, 5), x);
    const __m256i low =
        _mm256_and_si256(_mm256_srlv_epi32(lows, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
    const __m256i high =
        _mm256_and_si256(_mm256_srlv_epi32(highs, _mm256_setr_epi32(0, 2, 0, 2, 4, 6, 4, 6)), _mm256_set1_epi8(0x03));
    const __m256i sc8 = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
    return _mm512_sub_epi16(_mm512_cvtepu8_epi16(sc8), _mm512_set1_epi16(32));
}

// Q3_K: y = d (sc_j - 32) (q - 4 + 4 hbit), q 2 bits as Q2_K's, 16 sub-blocks of 16. Packed: d at
// 0, then pair p at 16 + 216 p: its scale units (q3_k_pair_scales), hmask at + 24 (2 chunks) and
// qs at + 88 (4 chunks). As Q2_K, with hmask chunk t beside qs chunk 2 H + t: element 128 H + 32 S
// + 16 t + l has its high bit at bit 4 H + S of hmask byte 16 t + l. The 4 comes off through the
// activation sums.
template <int C, int HS>
inline void q3_k_sub_blocks(const __m512i v[2], __m512i hm, const __m512i sc_h[2], const GgufPackedQ8Kx2Block* const* y,
                            __m512i acc[C]) {
    constexpr int H = HS / 4;
    constexpr int S = HS % 4;
    const __m512i low = _mm512_and_si512(S == 0 ? v[H] : _mm512_srli_epi16(v[H], 2 * S), _mm512_set1_epi8(3));
    const __m512i q = _mm512_or_si512(low, bit_to<4 * H + S, 2>(hm));
    const __m512i scale = sub_block_pair_scales<S>(sc_h[H]);
    for (int c = 0; c < C; ++c) {
        // <= 2 * 7 * 128 = 1792 per 16-bit lane
        const __m512i p16 = _mm512_maddubs_epi16(q, load512(y[c]->qs + 64 * (4 * H + S)));
        acc[c] = _mm512_dpwssd_epi32(acc[c], p16, scale);
    }
}

template <int C, int... HS>
inline void q3_k_pair(const __m512i v[2], __m512i hm, const __m512i sc_h[2], const GgufPackedQ8Kx2Block* const* y,
                      __m512i acc[C], std::integer_sequence<int, HS...> /*h s*/) {
    (q3_k_sub_blocks<C, HS>(v, hm, sc_h, y, acc), ...);
}

// Q3_K's pair: 16 + 216 p in the packed block.
struct PackedQ3K {
    static constexpr size_t kBlock = kGgufPackRows * sizeof(BlockQ3_K);
    static constexpr size_t kFirstPair = 16, kPair = 216;
    static constexpr bool kMins = false;
    template <int C>
    static void pair(const uint8_t* pair, const GgufPackedQ8Kx2Block* const* y, __m512i acc[C], __m512i* /*mins*/) {
        const __m512i sc = q3_k_pair_scales(pair);
        __m512i sc_h[2];
        scale_halves(sc, sc_h);
        const __m512i v[2] = {load512(pair + 88), load512(pair + 152)};
        q3_k_pair<C>(v, load512(pair + 24), sc_h, y, acc, std::make_integer_sequence<int, 8>{});
        // the 4 of q - 4
        for (int c = 0; c < C; ++c) acc[c] = _mm512_sub_epi32(acc[c], _mm512_slli_epi32(scaled_bsums(sc, y[c]), 2));
    }
};

// The 16-sub-block K-quants (W: PackedQ2K, PackedQ3K, PackedQ6K): per block, each pair's integer
// sums (W::pair), then the reference's f32 steps, sum += (d_w * d_a) * isum and, with mins (Q2_K,
// dmin at 16), sum -= (dmin_w * d_a) * isum_min.
template <class W, int C>
void tile_k16(int64_t nb, int rows, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
    constexpr int kPairs = (C + 1) / 2;
    __m512 sum[kPairs];
    for (int k = 0; k < kPairs; ++k) sum[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* pb = w + static_cast<size_t>(b) * W::kBlock;
        prefetch_ahead<W::kBlock>(pb);
        const GgufPackedQ8Kx2Block* y[C];
        k_blocks<C>(a, b, y);
        __m512i acc[C][4];
        __m512i acc_min[C][4];
        const auto pair_sums = [&](int p) {
            __m512i pacc[C];
            __m512i pmin[C];
            for (int c = 0; c < C; ++c) pacc[c] = _mm512_setzero_si512();
            W::template pair<C>(pb + W::kFirstPair + W::kPair * p, y, pacc, pmin);
            for (int c = 0; c < C; ++c) {
                acc[c][p] = pacc[c];
                if constexpr (W::kMins) acc_min[c][p] = pmin[c];
            }
        };
        if constexpr (C == 1) {
            // Decode: unrolled, the four pairs' chains of products overlap. The Q6_K GEMV read at
            // 0.84-0.92 of STREAM instead of 0.78-0.81 (gguf_dot_bench DecodePackedVsStored, Zen5,
            // 2 threads); with 4 activation rows (prefill) unrolling cost a quarter of the tile.
#pragma GCC unroll 4
            for (int p = 0; p < 4; ++p) pair_sums(p);
        } else {
            for (int p = 0; p < 4; ++p) pair_sums(p);
        }
        const __m512 dw = load_f16x8_twice(pb);
        for (int k = 0; k < kPairs; ++k) {
            const __m512 yd = add_block_sums<C>(acc, y, dw, k, sum[k]);
            if constexpr (W::kMins) {
                const __m512i s_min = join(rows_of_pairs(acc_min[2 * k]), rows_of_pairs(acc_min[second_of_pair<C>(k)]));
                const __m512 dmin = load_f16x8_twice(pb + 16);
                sum[k] = _mm512_sub_ps(sum[k], _mm512_mul_ps(_mm512_mul_ps(dmin, yd), _mm512_cvtepi32_ps(s_min)));
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

GgufPackedTileFn gguf_packed_tile_avx512(GgmlType type, int cols) {
    return tile_for_cols(cols, [type](auto c) { return tile_for<decltype(c)::value>(type); });
}

}  // namespace moeserve::kernels::cpu::detail
