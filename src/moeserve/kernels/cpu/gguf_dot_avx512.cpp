// AVX-512 VNNI GGUF dot products (see gguf_dot.h), as tiles of up to kGgufTileRows weight rows
// times kGgufTileCols activation rows: a weight block is unpacked once for every activation row
// of the tile and an activation block loaded once for every weight row, which is what makes a
// prefill GEMM out of them (the one-pair dot product unpacked the weight block once per token).
// Each (row, activation) pair runs the same operations in the same order whatever the tile's
// shape, so a tile's results have the bits of the one-pair kernel (a token's logits do not depend
// on its batch).
//
// 32-element types (Q4_0, Q5_0, Q8_0, MXFP4) against q8_0 activations, two blocks per 512-bit
// step: the weights become unsigned bytes q' = w + offset (Q4_0 and Q5_0 store them so; Q8_0's
// signed bytes get their top bit flipped, + 128; MXFP4's nibbles index a vpshufb table of its
// values + 12), so vpdpbusd (unsigned x signed) takes them against the
// signed activations; sum w a = sum q' a - offset * sum a, the second term one more vpdpbusd per
// activation block that every weight row of the tile shares. d_w * d_a * isum accumulates in 16
// f32 lanes (8 per block), as the AVX2 kernels do in 8. K-quants (Q2_K to Q6_K) against q8_K:
// vpmaddubsw (unsigned weight x signed activation, no pair can saturate) then vpdpwssd with the
// sub-block scales give each super-block's exact integer sums in 16 lanes, which accumulate times
// d_w * d_a in 16 f32 lanes: one horizontal sum per pair at the end, not one per super-block as
// the reference's (and AVX2's) f32 operations need (that was twice the instructions of the
// integer work at decode). So every type here is within f32 reassociation of the reference.
#include <immintrin.h>

#include <bit>
#include <cstring>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot_isa.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

inline float f16(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
inline __m512 join(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// sum(acc) - sum(acc_min): the 16 lanes folded to 8 first.
inline float sum_lanes(__m512 acc, __m256 acc_min) {
    const __m256 lanes =
        _mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    return hsum256(_mm256_sub_ps(lanes, acc_min));
}

// Decode streams the weights from memory once, a tile's rows interleaved block by block, which the
// hardware prefetchers follow poorly (a 4 x 1 tile of a Q6_K lm_head read at a third of the
// bandwidth of one row after another). So each step fetches the same bytes of the rows
// kPrefetchRows further on: the next tiles' rows, where the callers walk the rows in order.
constexpr int kPrefetchRows = 8;
inline void prefetch_ahead(const uint8_t* p, size_t bytes, size_t w_stride) {
    const uint8_t* ahead = p + kPrefetchRows * w_stride;
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + off), _MM_HINT_T0);
}

// ---- 32-element types against q8_0 ----
//
// A step is two blocks, b and b + 1 (an odd last block goes alone, b + 1 all zero), in 128-bit
// lanes [b's elements 0-15, b + 1's 0-15, b's 16-31, b + 1's 16-31]: the order two blocks' 16
// nibble bytes unpack in with one shift (low nibbles are elements 0-15). The activations are
// prepared in that order once per row (prepare_q8_0), with what every weight row of a tile
// would otherwise recompute: per step 64 bytes of values, the 16 lanes' -offset * (sum of their
// 4 bytes) as vpdpbusd's starting value, and the 16 lanes' d_a.
struct PreparedStep {
    int8_t y[64];
    int32_t corr[16];
    float d[16];
};
static_assert(sizeof(PreparedStep) == kGgufPreparedStepBytes);

// Lanes [x, y, x, y] (4 f32 each) of two f16 scales; y 0 for null.
inline __m512 scales2(const uint8_t* d0, const uint8_t* d1) {
    const uint32_t h0 = d0[0] | (d0[1] << 8);
    const uint32_t h1 = d1 == nullptr ? 0 : (d1[0] | (d1[1] << 8));
    const __m512 pair = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (h1 << 16)))));
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, pair);
}

// Two 32-byte rows of elements 0-31 (b, b + 1) in the step's lane order.
inline __m512i interleave(__m256i b0, __m256i b1) {
    return _mm512_shuffle_i64x2(join(b0, b1), join(b0, b1), _MM_SHUFFLE(3, 1, 2, 0));
}

template <int kOffset>
void prepare_q8_0(const BlockQ8_0* a, int64_t nb, PreparedStep* steps) {
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(kOffset));
    for (int64_t b = 0, s = 0; b < nb; b += 2, ++s) {
        const bool pair = b + 1 < nb;
        const __m512i y = interleave(load256(a[b].qs), pair ? load256(a[b + 1].qs) : _mm256_setzero_si256());
        _mm512_storeu_si512(steps[s].y, y);
        const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, y);
        _mm512_storeu_si512(steps[s].corr, _mm512_sub_epi32(_mm512_setzero_si512(), sums));
        _mm512_storeu_ps(steps[s].d, scales2(a[b].d, pair ? a[b + 1].d : nullptr));
    }
}

// Two blocks' 16 nibble bytes, [qs_b | qs_b+1], as the step's 64 elements (4 bits each).
inline __m512i nibbles64(const uint8_t* qs0, const uint8_t* qs1) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0));
    const __m256i z = qs1 == nullptr
                          ? _mm256_zextsi128_si256(lo)
                          : _mm256_inserti128_si256(_mm256_castsi128_si256(lo),
                                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)), 1);
    return _mm512_and_si512(join(z, _mm256_srli_epi16(z, 4)), _mm512_set1_epi8(0x0F));
}

// Q5_0's fifth bits (bit i of the block's little-endian u32 qh: element i) as 0x10 bytes in the
// step's lane order.
inline __m512i fifth_bits64(const uint8_t* qh0, const uint8_t* qh1) {
    uint32_t h0 = 0;
    uint32_t h1 = 0;
    std::memcpy(&h0, qh0, 4);
    if (qh1 != nullptr) std::memcpy(&h1, qh1, 4);
    const uint64_t mask =
        (h0 & 0xFFFFu) | (uint64_t{h1 & 0xFFFFu} << 16) | (uint64_t{h0 >> 16} << 32) | (uint64_t{h1 >> 16} << 48);
    return _mm512_maskz_mov_epi8(_cvtu64_mask64(mask), _mm512_set1_epi8(0x10));
}

struct Q4_0Weights {
    using Block = BlockQ4_0;
    static constexpr int kOffset = 8;
    static __m512 scales(const Block& b0, const Block* b1) { return scales2(b0.d, b1 ? b1->d : nullptr); }
    static __m512i bytes(const Block& b0, const Block* b1) { return nibbles64(b0.qs, b1 ? b1->qs : nullptr); }
};
struct Q5_0Weights {
    using Block = BlockQ5_0;
    static constexpr int kOffset = 16;
    static __m512 scales(const Block& b0, const Block* b1) { return scales2(b0.d, b1 ? b1->d : nullptr); }
    static __m512i bytes(const Block& b0, const Block* b1) {
        return _mm512_or_si512(nibbles64(b0.qs, b1 ? b1->qs : nullptr), fifth_bits64(b0.qh, b1 ? b1->qh : nullptr));
    }
};
struct Q8_0Weights {
    using Block = BlockQ8_0;
    static constexpr int kOffset = 128;
    static __m512 scales(const Block& b0, const Block* b1) { return scales2(b0.d, b1 ? b1->d : nullptr); }
    static __m512i bytes(const Block& b0, const Block* b1) {  // a missing b1 meets zero activations
        const __m512i w = interleave(load256(b0.qs), b1 ? load256(b1->qs) : _mm256_setzero_si256());
        return _mm512_xor_si512(w, _mm512_set1_epi8(-128));
    }
};

// 2^(e - 128), MXFP4's halved e8m0 scale, for every e: gguf_blocks.h's e8m0_to_f32_half (not
// called from here, for the reason scales_mins_k4 gives) as a table made at compile time, so a
// tile's rows take their scales with one load each, not a compare and select per block.
struct E8m0HalfTable {
    float v[256];
};
constexpr E8m0HalfTable make_e8m0_half_table() {
    E8m0HalfTable t{};
    for (uint32_t e = 0; e < 256; ++e) t.v[e] = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    return t;
}
constexpr E8m0HalfTable kE8m0Half = make_e8m0_half_table();

// MXFP4: vpshufb looks the nibbles up in the doubled e2m1 values plus 12 (0-24, unsigned for
// vpdpbusd); the scales are lanes [x, y, x, y] as scales2's, y 0 for a missing second block.
struct Mxfp4Weights {
    using Block = BlockMXFP4;
    static constexpr int kOffset = 12;
    static __m512 scales(const Block& b0, const Block* b1) {
        const __m512 pair =
            _mm512_castps128_ps512(_mm_setr_ps(kE8m0Half.v[b0.e], b1 ? kE8m0Half.v[b1->e] : 0.0f, 0, 0));
        return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0), pair);
    }
    static __m512i bytes(const Block& b0, const Block* b1) {
        const __m512i values =
            _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
        return _mm512_shuffle_epi8(values, nibbles64(b0.qs, b1 ? b1->qs : nullptr));
    }
};

// Per step the R weight rows are unpacked first (R vectors of bytes, R of scales), then each
// prepared activation step is loaded and met with all R: with 16 accumulators every live value
// stays in the 32 registers.
template <class W, int R, int C>
void tile_q8_0_acts(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    using Block = typename W::Block;
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
    for (int64_t b = 0, s = 0; b < nb; b += 2, ++s) {
        const bool pair = b + 1 < nb;
        __m512i q[R];
        __m512 dw[R];
        for (int r = 0; r < R; ++r) {
            const auto* blocks = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_stride);
            prefetch_ahead(reinterpret_cast<const uint8_t*>(blocks + b), 2 * sizeof(Block), w_stride);
            q[r] = W::bytes(blocks[b], pair ? &blocks[b + 1] : nullptr);
            dw[r] = W::scales(blocks[b], pair ? &blocks[b + 1] : nullptr);
        }
        for (int c = 0; c < C; ++c) {
            const PreparedStep& step = reinterpret_cast<const PreparedStep*>(a[c])[s];
            const __m512i y = _mm512_loadu_si512(step.y);
            const __m512i corr = _mm512_loadu_si512(step.corr);
            const __m512 da = _mm512_loadu_ps(step.d);
            for (int r = 0; r < R; ++r) {
                const __m512i p = _mm512_dpbusd_epi32(corr, q[r], y);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw[r], da), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) out[c * ldo + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
}

// ---- K-quants against q8_K ----

// 16-bit lanes: the first 16 hold lo, the last 16 hi (the scales of two 32-element sub-blocks).
inline __m512i scale_pair16(int lo, int hi) {
    return join(_mm256_set1_epi16(static_cast<int16_t>(lo)), _mm256_set1_epi16(static_cast<int16_t>(hi)));
}

// One Q4_K / Q5_K super-block of one weight row, unpacked for every activation row of the tile.
struct Q4KRow {
    __m512i q[4];   // elements 64 c .. 64 c + 63 as bytes
    __m512i sc[4];  // their sub-blocks' scales, 16-bit
    __m256i m;      // the 8 sub-blocks' mins, 32-bit
    float d;
    float dmin;
};

// All 8 scales and mins of a Q4_K block (the packing unpack_scale_min_k4 describes). Written
// here, not called from gguf_blocks.h: an inline function compiled in this file could be the copy
// the linker keeps for the whole program (matmul_tile_isa.h).
inline void scales_mins_k4(const uint8_t* q, int* sc, int* m) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
        m[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
}

// A Q4_K block (qh null) or a Q5_K block (its fifth bits: bit j of qh[l] for element 32 j + l).
inline void unpack_k4(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, const uint8_t* d,
                      const uint8_t* dmin, Q4KRow& row) {
    int sc[8];
    int m[8];
    scales_mins_k4(scales, sc, m);
    row.m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i hbits = qh != nullptr ? load256(qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
        const __m256i q = load256(qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh != nullptr) {
            const __m128i lo_shift = _mm_cvtsi32_si128(2 * c);
            const __m128i hi_shift = _mm_cvtsi32_si128(2 * c + 1);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hbits, lo_shift), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hbits, hi_shift), one), 4));
        }
        row.q[c] = join(lo, hi);
        row.sc[c] = scale_pair16(sc[2 * c], sc[2 * c + 1]);
    }
    row.d = f16(d);
    row.dmin = f16(dmin);
}
inline void unpack(const BlockQ4_K& x, Q4KRow& row) { unpack_k4(x.scales, x.qs, nullptr, x.d, x.dmin, row); }
inline void unpack(const BlockQ5_K& x, Q4KRow& row) { unpack_k4(x.scales, x.qs, x.qh, x.d, x.dmin, row); }

// Per pair and super-block: the scaled sub-block sums in 16 int32 lanes (vpdpwssd), times
// d_w * d_a into 16 f32 lanes; the mins' term m_j * (activation sum of sub-block j) in 8 int32
// lanes, times dmin_w * d_a into 8 more. One horizontal sum per pair at the end.
template <class Block, int R, int C>
void tile_k4(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    __m512 acc[R][C];
    __m256 acc_min[R][C];
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) {
            acc[r][c] = _mm512_setzero_ps();
            acc_min[r][c] = _mm256_setzero_ps();
        }
    }
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_K* y[C];
        __m256i asum[C];  // the activation's sum over each 32-element sub-block
        for (int c = 0; c < C; ++c) {
            y[c] = reinterpret_cast<const BlockQ8_K*>(a[c]) + b;
            asum[c] = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[c]->bsums)), ones16);
        }
        for (int r = 0; r < R; ++r) {
            const Block& block = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_stride)[b];
            prefetch_ahead(reinterpret_cast<const uint8_t*>(&block), sizeof(Block), w_stride);
            Q4KRow row;
            unpack(block, row);
            for (int c = 0; c < C; ++c) {
                __m512i isum = _mm512_setzero_si512();
                for (int k = 0; k < 4; ++k) {
                    const __m512i p = _mm512_maddubs_epi16(row.q[k], _mm512_loadu_si512(y[c]->qs + 64 * k));
                    isum = _mm512_dpwssd_epi32(isum, p, row.sc[k]);
                }
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(row.d * y[c]->d), acc[r][c]);
                const __m256 mins = _mm256_cvtepi32_ps(_mm256_mullo_epi32(row.m, asum[c]));
                acc_min[r][c] = _mm256_fmadd_ps(mins, _mm256_set1_ps(row.dmin * y[c]->d), acc_min[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) out[c * ldo + r] = sum_lanes(acc[r][c], acc_min[r][c]);
    }
}

// ---- K-quants with 16-element sub-blocks: Q2_K, Q3_K, Q6_K ----

// One super-block of one weight row: its values as unsigned bytes (the signed value + kOffset;
// Q2_K's as stored), 64 elements per vector, the sub-blocks' scales as 16-bit lanes (128-bit lane
// i of vector k: sub-block 4 k + i), and Q2_K's mins as 16 16-bit lanes.
struct K16Row {
    __m512i q[4];
    __m512i sc[4];
    __m256i mins;
    float d;
    float dmin;
};

// The 16 sub-block scales (16-bit) spread over the 4 vectors' 128-bit lanes: one vpermw each.
inline void spread_scales(__m256i scales16, __m512i* sc) {
    const __m512i s = _mm512_castsi256_si512(scales16);
    const __m512i lane = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                                          12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int k = 0; k < 4; ++k) {  // 16-bit lane i of vector k takes scale 4 k + i / 8
        const __m512i idx =
            _mm512_add_epi16(_mm512_set1_epi16(static_cast<int16_t>(4 * k)), _mm512_srli_epi16(lane, 3));
        sc[k] = _mm512_permutexvar_epi16(idx, s);
    }
}

// Q2_K / Q3_K's 2-bit values: element 128 h + 32 s + l is bits 2s..2s+1 of qs[32 h + l], so
// vector k = 2 h + t holds s = 2 t (its first 32 bytes) and s = 2 t + 1.
inline __m512i two_bits64(const uint8_t* qs, int k) {
    const __m256i q = load256(qs + 32 * (k / 2));
    const __m256i m3 = _mm256_set1_epi8(3);
    const int shift = 4 * (k % 2);
    return join(_mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(shift)), m3),
                _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(shift + 2)), m3));
}

inline void unpack(const BlockQ2_K& x, K16Row& row) {
    const __m256i packed = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
    spread_scales(_mm256_and_si256(packed, _mm256_set1_epi16(0xF)), row.sc);
    row.mins = _mm256_srli_epi16(packed, 4);
    for (int k = 0; k < 4; ++k) row.q[k] = two_bits64(x.qs, k);
    row.d = f16(x.d);
    row.dmin = f16(x.dmin);
}

// Q3_K: q + 4 = the 2 bits + 4 * hbit (hbit of element 32 b + l: bit b of hmask[l]); scale_j
// - 32 from the 12 packed bytes (low nibbles in bytes 0-7, j >= 8 in their high halves; the top
// 2 bits in byte 8 + j % 4 at bit 2 (j / 4)). Unpacked here, not through gguf_blocks.h's
// q3_k_scale, for the reason scales_mins_k4 gives.
inline void unpack(const BlockQ3_K& x, K16Row& row) {
    uint64_t low8 = 0;
    uint32_t high4 = 0;
    std::memcpy(&low8, x.scales, 8);
    std::memcpy(&high4, x.scales + 8, 4);
    const __m128i lo = _mm_cvtsi64_si128(static_cast<int64_t>(low8));
    const __m128i m4 = _mm_set1_epi8(0xF);
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(lo, m4), _mm_and_si128(_mm_srli_epi16(lo, 4), m4));
    const __m128i high = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(high4)), _mm_set_epi32(6, 4, 2, 0)), _mm_set1_epi8(3));
    const __m128i scales = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
    spread_scales(_mm256_cvtepi8_epi16(scales), row.sc);
    const __m256i hmask = load256(x.hmask);
    const __m256i one = _mm256_set1_epi8(1);
    for (int k = 0; k < 4; ++k) {  // vector k: b = 2 k for its first 32 bytes, 2 k + 1 for the rest
        const __m512i hbit = join(_mm256_and_si256(_mm256_srl_epi16(hmask, _mm_cvtsi32_si128(2 * k)), one),
                                  _mm256_and_si256(_mm256_srl_epi16(hmask, _mm_cvtsi32_si128(2 * k + 1)), one));
        row.q[k] = _mm512_or_si512(two_bits64(x.qs, k), _mm512_slli_epi16(hbit, 2));
    }
    row.d = f16(x.d);
    row.dmin = 0.0f;
}

// Q6_K: elements 128 h + 0..63 are the low nibbles of ql[64 h ..] with bits 0-1 (first 32) /
// 2-3 (next 32) of qh[32 h + l] on top; elements 128 h + 64..127 the high nibbles, bits 4-5 / 6-7.
inline void unpack(const BlockQ6_K& x, K16Row& row) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(x.ql + 64 * h);
        const __m256i qh256 = load256(x.qh + 32 * h);
        const __m512i qh = join(qh256, _mm256_srli_epi16(qh256, 2));
        const __m512i high0 = _mm512_slli_epi16(_mm512_and_si512(qh, m3), 4);
        const __m512i high1 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), m3), 4);
        row.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), high0);
        row.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), high1);
    }
    spread_scales(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales))), row.sc);
    row.d = f16(x.d);
    row.dmin = 0.0f;
}

// kOffset: the bytes are the signed values + kOffset (Q3_K 4, Q6_K 32; Q2_K 0: unsigned values),
// taken out as kOffset * (activation pair sums) before vpdpwssd. kMins: Q2_K's dmin term, through
// the activation's 16-element sums (bsums) in 8 more lanes.
template <class Block, int kOffset, bool kMins, int R, int C>
void tile_k16(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    __m512 acc[R][C];
    __m256 acc_min[R][C];
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) {
            acc[r][c] = _mm512_setzero_ps();
            acc_min[r][c] = _mm256_setzero_ps();
        }
    }
    const __m512i offset_bytes = _mm512_set1_epi8(kOffset);
    for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_K* y[C];
        __m512i offset[C][4];
        for (int c = 0; c < C; ++c) {
            y[c] = reinterpret_cast<const BlockQ8_K*>(a[c]) + b;
            for (int k = 0; k < 4 && kOffset != 0; ++k) {
                offset[c][k] = _mm512_maddubs_epi16(offset_bytes, _mm512_loadu_si512(y[c]->qs + 64 * k));
            }
        }
        for (int r = 0; r < R; ++r) {
            const Block& block = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_stride)[b];
            prefetch_ahead(reinterpret_cast<const uint8_t*>(&block), sizeof(Block), w_stride);
            K16Row row;
            unpack(block, row);
            for (int c = 0; c < C; ++c) {
                __m512i isum = _mm512_setzero_si512();
                for (int k = 0; k < 4; ++k) {
                    __m512i p = _mm512_maddubs_epi16(row.q[k], _mm512_loadu_si512(y[c]->qs + 64 * k));
                    if constexpr (kOffset != 0) p = _mm512_sub_epi16(p, offset[c][k]);
                    isum = _mm512_dpwssd_epi32(isum, p, row.sc[k]);
                }
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(row.d * y[c]->d), acc[r][c]);
                if constexpr (kMins) {
                    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[c]->bsums));
                    const __m256 mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(row.mins, bsums));
                    acc_min[r][c] = _mm256_fmadd_ps(mins, _mm256_set1_ps(row.dmin * y[c]->d), acc_min[r][c]);
                }
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) out[c * ldo + r] = sum_lanes(acc[r][c], acc_min[r][c]);
    }
}

// ---- the R x C table ----

// The three tile families as types whose tile<R, C> the table takes.
template <class W>
struct Q8_0Family {
    template <int R, int C>
    static void tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* const* a, float* out, int64_t ldo) {
        tile_q8_0_acts<W, R, C>(nb, w, ws, a, out, ldo);
    }
};
template <class Block>
struct K4Family {
    template <int R, int C>
    static void tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* const* a, float* out, int64_t ldo) {
        tile_k4<Block, R, C>(nb, w, ws, a, out, ldo);
    }
};
template <class Block, int kOffset, bool kMins>
struct K16Family {
    template <int R, int C>
    static void tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* const* a, float* out, int64_t ldo) {
        tile_k16<Block, kOffset, kMins, R, C>(nb, w, ws, a, out, ldo);
    }
};
using Q2KFamily = K16Family<BlockQ2_K, 0, true>;
using Q3KFamily = K16Family<BlockQ3_K, 4, false>;
using Q6KFamily = K16Family<BlockQ6_K, 32, false>;

template <class F>
GgufTileFn pick(int rows, int cols) {
    static constexpr GgufTileFn kTable[4][4] = {
        {F::template tile<1, 1>, F::template tile<1, 2>, F::template tile<1, 3>, F::template tile<1, 4>},
        {F::template tile<2, 1>, F::template tile<2, 2>, F::template tile<2, 3>, F::template tile<2, 4>},
        {F::template tile<3, 1>, F::template tile<3, 2>, F::template tile<3, 3>, F::template tile<3, 4>},
        {F::template tile<4, 1>, F::template tile<4, 2>, F::template tile<4, 3>, F::template tile<4, 4>},
    };
    return kTable[rows - 1][cols - 1];
}

// The pair kernels: 1 x 1 tiles. The 32-element types take q8_0 rows (gguf_vec_dot's contract),
// prepared here into this thread's scratch, as the tiles' callers prepare theirs.
template <class F>
float one_pair(int64_t nb, const void* w, const void* a) {
    float out = 0.0f;
    const auto* act = static_cast<const uint8_t*>(a);
    F::template tile<1, 1>(nb, static_cast<const uint8_t*>(w), 0, &act, &out, 1);
    return out;
}

template <class W>
void prepare_row(const void* q8, int64_t nb, void* dst) {
    prepare_q8_0<W::kOffset>(static_cast<const BlockQ8_0*>(q8), nb, static_cast<PreparedStep*>(dst));
}

template <class W>
float one_pair_q8_0(int64_t nb, const void* w, const void* a) {
    void* steps = thread_scratch(kGgufDotScratchSlot, static_cast<int64_t>(sizeof(PreparedStep)) * ((nb + 1) / 2));
    prepare_row<W>(a, nb, steps);
    return one_pair<Q8_0Family<W>>(nb, w, steps);
}

}  // namespace

GgufTileFn gguf_tile_avx512(GgmlType type, int rows, int cols) {
    switch (type) {
        case GgmlType::kQ4_0:
            return pick<Q8_0Family<Q4_0Weights>>(rows, cols);
        case GgmlType::kQ5_0:
            return pick<Q8_0Family<Q5_0Weights>>(rows, cols);
        case GgmlType::kQ8_0:
            return pick<Q8_0Family<Q8_0Weights>>(rows, cols);
        case GgmlType::kMXFP4:
            return pick<Q8_0Family<Mxfp4Weights>>(rows, cols);
        case GgmlType::kQ2_K:
            return pick<Q2KFamily>(rows, cols);
        case GgmlType::kQ3_K:
            return pick<Q3KFamily>(rows, cols);
        case GgmlType::kQ4_K:
            return pick<K4Family<BlockQ4_K>>(rows, cols);
        case GgmlType::kQ5_K:
            return pick<K4Family<BlockQ5_K>>(rows, cols);
        case GgmlType::kQ6_K:
            return pick<Q6KFamily>(rows, cols);
        default:
            return nullptr;
    }
}

GgufPrepareFn gguf_prepare_avx512(GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_0:
            return &prepare_row<Q4_0Weights>;
        case GgmlType::kQ5_0:
            return &prepare_row<Q5_0Weights>;
        case GgmlType::kQ8_0:
            return &prepare_row<Q8_0Weights>;
        case GgmlType::kMXFP4:
            return &prepare_row<Mxfp4Weights>;
        default:
            return nullptr;
    }
}

float vec_dot_q4_0_q8_0_avx512(int64_t nb, const void* w, const void* a) {
    return one_pair_q8_0<Q4_0Weights>(nb, w, a);
}
float vec_dot_q5_0_q8_0_avx512(int64_t nb, const void* w, const void* a) {
    return one_pair_q8_0<Q5_0Weights>(nb, w, a);
}
float vec_dot_q8_0_q8_0_avx512(int64_t nb, const void* w, const void* a) {
    return one_pair_q8_0<Q8_0Weights>(nb, w, a);
}
float vec_dot_mxfp4_q8_0_avx512(int64_t nb, const void* w, const void* a) {
    return one_pair_q8_0<Mxfp4Weights>(nb, w, a);
}
float vec_dot_q2_k_q8_k_avx512(int64_t nb, const void* w, const void* a) { return one_pair<Q2KFamily>(nb, w, a); }
float vec_dot_q3_k_q8_k_avx512(int64_t nb, const void* w, const void* a) { return one_pair<Q3KFamily>(nb, w, a); }
float vec_dot_q4_k_q8_k_avx512(int64_t nb, const void* w, const void* a) {
    return one_pair<K4Family<BlockQ4_K>>(nb, w, a);
}
float vec_dot_q5_k_q8_k_avx512(int64_t nb, const void* w, const void* a) {
    return one_pair<K4Family<BlockQ5_K>>(nb, w, a);
}
float vec_dot_q6_k_q8_k_avx512(int64_t nb, const void* w, const void* a) { return one_pair<Q6KFamily>(nb, w, a); }

}  // namespace moeserve::kernels::cpu::detail
