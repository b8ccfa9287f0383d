// AVX2 GGUF tiles (see gguf_dot.h's GgufTiles): rows weight rows times cols activation rows, each
// weight block unpacked once for all of the tile's activation rows, where the pair kernels
// unpack it again for every token. A tile walks its weight rows one at a time against all its
// activation rows: the accumulators of one row's pairs fit the 16 ymm registers (a 4 x 4 tile's
// would not), and the activation blocks it re-reads per weight row are L1-resident.
// Each pair runs the pair kernel's steps in its order, so a tile gives the pair kernels' bits:
// - 32-element types: the same per-block steps (gguf_dot_avx2.h) into the pair's own 8 f32 lanes,
//   and the same horizontal sum at the end;
// - K-quants: a super-block's integer sums are exact whatever the order of their products, so the
//   weights are unpacked into bytes and 16-bit scales once per super-block and each pair reduces
//   them against its activation block; then the pair kernels' (the reference's) f32 operations.
// One activation row has no tile (null): the pair kernels stream decode's rows one after another.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot_avx2.h"
#include "moeserve/kernels/cpu/gguf_dot_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

using namespace avx2;

// ---- 32-element types against q8_0 ----

template <class W>
struct SignedFamily {
    template <int C>
    static void row(int64_t nb, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
        const auto* x = reinterpret_cast<const typename W::Block*>(w);
        const BlockQ8_0* y[C];
        __m256 acc[C];
        for (int c = 0; c < C; ++c) {
            y[c] = reinterpret_cast<const BlockQ8_0*>(a[c]);
            acc[c] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i q = W::values(x[b]);
            const float d = W::scale(x[b]);
            for (int c = 0; c < C; ++c) acc[c] = step_q8_0(acc[c], q, d, y[c][b]);
        }
        for (int c = 0; c < C; ++c) out[c * ldo] = simd::hsum(acc[c]);
    }
};

template <class W>
struct MinFamily {
    template <int C>
    static void row(int64_t nb, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
        const auto* x = reinterpret_cast<const typename W::Block*>(w);
        const BlockQ8_0* y[C];
        __m256 acc[C];
        __m256 acc_min[C];
        for (int c = 0; c < C; ++c) {
            y[c] = reinterpret_cast<const BlockQ8_0*>(a[c]);
            acc[c] = _mm256_setzero_ps();
            acc_min[c] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i q = W::values(x[b]);
            for (int c = 0; c < C; ++c) step_min_q8_0(acc[c], acc_min[c], q, x[b], y[c][b]);
        }
        for (int c = 0; c < C; ++c) out[c * ldo] = simd::hsum(_mm256_add_ps(acc[c], acc_min[c]));
    }
};

// ---- K-quants against q8_K ----

// One weight super-block unpacked for all of a tile's activation rows: element 32 t + l as the
// unsigned byte q[32 t + l], the 16-bit multiplier of its 16-element sub-block in lane l / 2 of
// scales[t] (vpmaddwd's pairs), and the multipliers of the activation's 16 bsums in `mins`.
// Per pair, isum = sum scale * q * q8 and isum_mins = sum mins * bsums (exact int32: |q| <= 63,
// scales and mins 6-bit or int8).
struct KUnpacked {
    alignas(32) uint8_t q[kQK_K];
    __m256i scales[8];
    __m256i mins;
    float d;
    float dmin;
};

inline void store_q(KUnpacked& u, int t, __m256i q) { _mm256_store_si256(reinterpret_cast<__m256i*>(u.q + 32 * t), q); }

// scales[t] from 8 16-bit values per 128-bit lane: 16-bit lane t of each lane in all of it.
inline void broadcast_scales(KUnpacked& u, __m256i lanes) {
    for (int t = 0; t < 8; ++t)
        u.scales[t] = _mm256_shuffle_epi8(lanes, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * t)));
}

// The 32-element groups of 16-element sub-blocks: from 16 16-bit scales j = 0-15 in order, the
// even j to the low lane and the odd to the high, so that broadcast_scales gives scales[t]
// sub-block 2t's scale in its low lane and 2t + 1's in its high (elements 32 t + l, l < 16 / >= 16).
inline void sub_block_pair_scales(KUnpacked& u, __m256i scales16) {
    const __m256i evens_odds = _mm256_shuffle_epi8(
        scales16, _mm256_broadcastsi128_si256(_mm_set_epi8(15, 14, 11, 10, 7, 6, 3, 2, 13, 12, 9, 8, 5, 4, 1, 0)));
    broadcast_scales(u, _mm256_permute4x64_epi64(evens_odds, _MM_SHUFFLE(3, 1, 2, 0)));
}

// Q4_K / Q5_K: y = d sc_j q - dmin m_j over 8 sub-blocks of 32 (the fifth bits of Q5_K: bit t of
// qh[l] for element 32 t + l); isum_mins is the dmin term's sum_j m_j (bsums_2j + bsums_2j+1).
template <class Block>
struct K4 {
    using BlockType = Block;
    static constexpr int kOffset = 0;  // a separate dmin term
    // The 6-bit scales and mins (gguf_blocks.h's unpack_scale_min_k4), four bytes at a time.
    static void unpack_scales(const uint8_t* packed, KUnpacked& u) {
        uint32_t w[3];
        std::memcpy(w, packed, 12);
        const uint32_t sc_lo = w[0] & 0x3f3f3f3fu;
        const uint32_t m_lo = w[1] & 0x3f3f3f3fu;
        const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
        const uint32_t m_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
        const __m128i sc = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc_lo | uint64_t{sc_hi} << 32)));
        broadcast_scales(u, _mm256_broadcastsi128_si256(sc));
        const __m128i m = _mm_cvtsi64_si128(static_cast<int64_t>(m_lo | uint64_t{m_hi} << 32));
        u.mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));  // m_j for bsums 2j and 2j + 1
    }
    static void unpack(const Block& x, KUnpacked& u) {
        unpack_scales(x.scales, u);
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int c = 0; c < 4; ++c) {
            const __m256i q = load256(x.qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if constexpr (std::is_same_v<Block, BlockQ5_K>) {
                const __m256i one = _mm256_set1_epi8(1);
                const __m256i hbits = load256(x.qh);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(shift_right(hbits, 2 * c), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(shift_right(hbits, 2 * c + 1), one), 4));
            }
            store_q(u, 2 * c, lo);
            store_q(u, 2 * c + 1, hi);
        }
        u.d = f16(x.d);
        u.dmin = f16(x.dmin);
    }
};

// Q6_K: y = d scales_j (q - 32), q 6 bits (gguf_blocks.h); the 32 comes out as
// 32 sum_j scales_j bsums_j.
struct Q6K {
    using BlockType = BlockQ6_K;
    static constexpr int kOffset = 32;
    static void unpack(const BlockQ6_K& x, KUnpacked& u) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i m3 = _mm256_set1_epi8(3);
        for (int h = 0; h < 2; ++h) {
            const __m256i ql[2] = {load256(x.ql + 64 * h), load256(x.ql + 64 * h + 32)};
            const __m256i qh = load256(x.qh + 32 * h);
            for (int r = 0; r < 4; ++r) {
                const __m256i low = _mm256_and_si256(shift_right(ql[r % 2], 4 * (r / 2)), m4);
                const __m256i high = _mm256_slli_epi16(_mm256_and_si256(shift_right(qh, 2 * r), m3), 4);
                store_q(u, 4 * h + r, _mm256_or_si256(low, high));
            }
        }
        u.mins = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
        sub_block_pair_scales(u, u.mins);
        u.d = f16(x.d);
    }
};

// Q2_K: y = d (sc_j & 15) q - dmin (sc_j >> 4), q 2 bits: element 128 h + 32 s + l is bits 2s of
// qs[32 h + l].
struct Q2K {
    using BlockType = BlockQ2_K;
    static constexpr int kOffset = 0;
    static void unpack(const BlockQ2_K& x, KUnpacked& u) {
        const __m256i m3 = _mm256_set1_epi8(3);
        for (int h = 0; h < 2; ++h) {
            const __m256i q = load256(x.qs + 32 * h);
            for (int s = 0; s < 4; ++s) store_q(u, 4 * h + s, _mm256_and_si256(shift_right(q, 2 * s), m3));
        }
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
        const __m128i m4 = _mm_set1_epi8(0x0F);
        sub_block_pair_scales(u, _mm256_cvtepu8_epi16(_mm_and_si128(packed, m4)));
        u.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        u.d = f16(x.d);
        u.dmin = f16(x.dmin);
    }
};

// Q3_K: y = d (scale_j - 32) (q - 4), q = the 2 bits as Q2_K's | the hmask bit << 2 (element
// 32 t + l's is bit t of hmask[l]); the 4 comes out as 4 sum_j (scale_j - 32) bsums_j.
struct Q3K {
    using BlockType = BlockQ3_K;
    static constexpr int kOffset = 4;
    static void unpack(const BlockQ3_K& x, KUnpacked& u) {
        const __m256i m3 = _mm256_set1_epi8(3);
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i hmask = load256(x.hmask);
        for (int h = 0; h < 2; ++h) {
            const __m256i q = load256(x.qs + 32 * h);
            for (int s = 0; s < 4; ++s) {
                const __m256i hbit = _mm256_slli_epi16(_mm256_and_si256(shift_right(hmask, 4 * h + s), one), 2);
                store_q(u, 4 * h + s, _mm256_or_si256(_mm256_and_si256(shift_right(q, 2 * s), m3), hbit));
            }
        }
        u.mins = q3_k_scales(x.scales);
        sub_block_pair_scales(u, u.mins);
        u.d = f16(x.d);
    }
};

// The pair's two exact integer sums against one activation super-block.
inline void k_isums(const KUnpacked& u, const BlockQ8_K& a, int& isum, int& isum_mins) {
    __m256i acc = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) {
        const __m256i p = _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(u.q + 32 * t)),
                                               load256(a.qs + 32 * t));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, u.scales[t]));
    }
    // both sums reduced together: [acc 0+1, 2+3, mins 0+1, 2+3] per lane, the lanes added, again
    const __m256i pairs = _mm256_hadd_epi32(acc, _mm256_madd_epi16(u.mins, load256(a.bsums)));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    s = _mm_hadd_epi32(s, s);
    isum = _mm_cvtsi128_si32(s);
    isum_mins = _mm_extract_epi32(s, 1);
}

template <class K>
struct KFamily {
    template <int C>
    static void row(int64_t nb, const uint8_t* w, const uint8_t* const* a, float* out, int64_t ldo) {
        const auto* x = reinterpret_cast<const typename K::BlockType*>(w);
        const BlockQ8_K* y[C];
        float sum[C];
        for (int c = 0; c < C; ++c) {
            y[c] = reinterpret_cast<const BlockQ8_K*>(a[c]);
            sum[c] = 0.0f;
        }
        KUnpacked u;
        for (int64_t b = 0; b < nb; ++b) {
            K::unpack(x[b], u);
            for (int c = 0; c < C; ++c) {
                int isum = 0;
                int isum_mins = 0;
                k_isums(u, y[c][b], isum, isum_mins);
                // the pair kernels' f32 operations, in their order (-ffp-contract=off)
                if constexpr (K::kOffset == 0) {
                    sum[c] += (u.d * y[c][b].d) * static_cast<float>(isum);
                    sum[c] -= (u.dmin * y[c][b].d) * static_cast<float>(isum_mins);
                } else {
                    sum[c] += (u.d * y[c][b].d) * static_cast<float>(isum - K::kOffset * isum_mins);
                }
            }
        }
        for (int c = 0; c < C; ++c) out[c * ldo] = sum[c];
    }
};

// R weight rows, one after another (see the top of the file).
template <class F, int R, int C>
void tile(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    for (int r = 0; r < R; ++r) F::template row<C>(nb, w + static_cast<size_t>(r) * w_stride, a, out + r, ldo);
}

template <class F>
GgufTileFn pick(int rows, int cols) {
    static constexpr GgufTileFn kTable[4][3] = {
        {tile<F, 1, 2>, tile<F, 1, 3>, tile<F, 1, 4>},
        {tile<F, 2, 2>, tile<F, 2, 3>, tile<F, 2, 4>},
        {tile<F, 3, 2>, tile<F, 3, 3>, tile<F, 3, 4>},
        {tile<F, 4, 2>, tile<F, 4, 3>, tile<F, 4, 4>},
    };
    return cols < 2 ? nullptr : kTable[rows - 1][cols - 2];
}

}  // namespace

GgufTileFn gguf_tile_avx2(GgmlType type, int rows, int cols) {
    switch (type) {
        case GgmlType::kQ4_0:
            return pick<SignedFamily<Q4_0Weights>>(rows, cols);
        case GgmlType::kQ5_0:
            return pick<SignedFamily<Q5_0Weights>>(rows, cols);
        case GgmlType::kQ8_0:
            return pick<SignedFamily<Q8_0Weights>>(rows, cols);
        case GgmlType::kMXFP4:
            return pick<SignedFamily<Mxfp4Weights>>(rows, cols);
        case GgmlType::kQ4_1:
            return pick<MinFamily<Q4_1Weights>>(rows, cols);
        case GgmlType::kQ5_1:
            return pick<MinFamily<Q5_1Weights>>(rows, cols);
        case GgmlType::kQ2_K:
            return pick<KFamily<Q2K>>(rows, cols);
        case GgmlType::kQ3_K:
            return pick<KFamily<Q3K>>(rows, cols);
        case GgmlType::kQ4_K:
            return pick<KFamily<K4<BlockQ4_K>>>(rows, cols);
        case GgmlType::kQ5_K:
            return pick<KFamily<K4<BlockQ5_K>>>(rows, cols);
        case GgmlType::kQ6_K:
            return pick<KFamily<Q6K>>(rows, cols);
        default:
            return nullptr;
    }
}

}  // namespace moeserve::kernels::cpu::detail
