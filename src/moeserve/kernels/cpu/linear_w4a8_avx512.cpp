// The AVX-512 VNNI W4A8 tile. Per chunk of 128 columns a weight row is 64 code bytes: masked to
// its low nibbles (the even columns) and shifted to its high ones (the odd columns), each plane
// meets the chunk's even or odd activations (linear_w4a8.h's order) in one vpdpbusd, unsigned
// codes times signed activations. Each dword lane then holds the exact integer product of 8
// consecutive columns, all in one group (one group per row, or groups that are multiples of 128
// columns or divide 128); the lanes add up in int32 over the group's chunks (exact: at most
// 8 * 15 * 127 a chunk), then are converted to f32 and multiplied by the group's scale once (a
// conversion per chunk cost as much as the chunk's products). The zero points' products,
// zero * qsum per group, are summed separately and subtracted once per output. The last chunk of
// a row is read with a byte mask (the activations past k are zeros).
// AVX-512 F/BW/VL/DQ + VNNI code.
#include <immintrin.h>

#include "moeserve/kernels/cpu/linear_w4a8.h"

namespace moeserve::kernels::cpu::detail {
namespace {

constexpr int64_t kChunkBytes = kW4a8Chunk / 2;

// The project's inline helpers are not called here (docs/kernels.md's ODR rule): these are their
// local equivalents.
int64_t groups_of(const Int4Weights& w) { return (w.k + w.group_size - 1) / w.group_size; }
W4a8Rows rows_from(const W4a8Rows& a, int64_t i0) {
    return {a.q + i0 * a.ldq, a.sx + i0, a.qsum + i0 * a.ldg, a.ldq, a.ldg};
}

// How the chunks of a row meet its groups: `wide` groups span whole chunks (one group per row, or
// multiples of 128 columns: chunks_per_group of them), the others (32, 64 columns) split a chunk
// into lanes (lanes: each dword lane's group within the chunk). The group of a chunk is counted,
// never divided for: a division per chunk and row cost more than the chunk's products.
struct GroupWalk {
    bool wide;
    int64_t chunks_per_group;
    int shift;  // narrow groups: log2(group_size)
    __m512i lanes;
};

GroupWalk group_walk(const Int4Weights& w, int64_t ng) {
    const bool wide = ng == 1 || w.group_size >= kW4a8Chunk;
    const int shift = w.group_size == 32 ? 5 : 6;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return {wide, ng == 1 ? int64_t{1} << 40 : w.group_size / kW4a8Chunk, shift,
            _mm512_srli_epi32(_mm512_slli_epi32(lane, 3), static_cast<unsigned>(shift))};
}

// The 16 lanes' scales of a weight row (its scales at `row`) in a chunk whose first group is g0.
inline __m512 chunk_scales(const GroupWalk& walk, const float* row, int64_t g0, int64_t ng) {
    if (walk.wide) return _mm512_set1_ps(row[g0]);
    const int64_t per_chunk = kW4a8Chunk >> walk.shift;
    const int64_t valid = ng - g0 < per_chunk ? ng - g0 : per_chunk;
    return _mm512_permutexvar_ps(walk.lanes,
                                 _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << valid) - 1), row + g0));
}

// acc minus sum_g scale[j, g] * zero[j, g] * qsum[i, g] (the zero points' share of output (i, j)),
// lane by lane: one horizontal sum of the result is the output.
inline __m512 minus_zero_products(__m512 acc, const Int4Weights& w, int64_t j, const float* qsum, int64_t ng) {
    for (int64_t g = 0; g < ng; g += 16) {
        const auto mask = static_cast<__mmask16>(ng - g >= 16 ? 0xFFFF : (1u << (ng - g)) - 1);
        const __m512 sz = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, w.scale + j * ng + g),
                                        _mm512_maskz_loadu_ps(mask, w.zero + j * ng + g));
        acc = _mm512_fnmadd_ps(sz, _mm512_maskz_loadu_ps(mask, qsum + g), acc);
    }
    return acc;
}

// MR activation rows against weight rows j..j+NR-1. kAcross: groups span several chunks, whose
// products add up in int32 before the group's scale (more registers: smaller tiles); else each
// chunk is scaled as it is done. prefetch: the next NR rows follow (their chunk is fetched while this one is computed:
// rows of a few hundred bytes are too short for the hardware prefetcher to ramp up).
template <int MR, int NR, bool kAcross>
void tile_block(const W4a8Rows& a, const Int4Weights& w, int64_t j, float* out, int64_t ldo, const GroupWalk& walk,
                bool prefetch) {
    const int64_t k = w.k, ng = groups_of(w);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    __m512 acc[MR][NR];
    __m512i dot[MR][NR];  // the current group's exact products, per lane
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            acc[r][c] = _mm512_setzero_ps();
            dot[r][c] = _mm512_setzero_si512();
        }
    }
    int64_t group = 0, chunks_left = walk.chunks_per_group;  // wide groups: the chunk's group
    for (int64_t c0 = 0; c0 < k; c0 += kW4a8Chunk) {
        const int64_t g0 = walk.wide ? group : c0 >> walk.shift;
        // scale the products when the group ends (narrow groups: every chunk holds several)
        bool scale_now = !walk.wide || c0 + kW4a8Chunk >= k;
        if (walk.wide && --chunks_left == 0) {
            ++group;
            chunks_left = walk.chunks_per_group;
            scale_now = true;
        }
        const int64_t bytes = (k - c0) / 2 < kChunkBytes ? (k - c0) / 2 : kChunkBytes;
        const __mmask64 mask = bytes == kChunkBytes ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
        __m512i lo[NR], hi[NR];
        if (prefetch) {
            for (int c = 0; c < NR; ++c) {
                _mm_prefetch(reinterpret_cast<const char*>(w.codes + (j + NR + c) * (k / 2) + c0 / 2), _MM_HINT_T0);
            }
        }
        for (int c = 0; c < NR; ++c) {
            const __m512i codes = _mm512_maskz_loadu_epi8(mask, w.codes + (j + c) * (k / 2) + c0 / 2);
            lo[c] = _mm512_and_si512(codes, nibble);
            hi[c] = _mm512_and_si512(_mm512_srli_epi16(codes, 4), nibble);
        }
        for (int r = 0; r < MR; ++r) {
            const __m512i even = _mm512_loadu_si512(a.q + r * a.ldq + c0);
            const __m512i odd = _mm512_loadu_si512(a.q + r * a.ldq + c0 + kChunkBytes);
            for (int c = 0; c < NR; ++c) {
                const __m512i start = kAcross ? dot[r][c] : _mm512_setzero_si512();
                dot[r][c] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, lo[c], even), hi[c], odd);
            }
        }
        if (!scale_now) continue;
        for (int c = 0; c < NR; ++c) {
            const __m512 sc = chunk_scales(walk, w.scale + (j + c) * ng, g0, ng);
            for (int r = 0; r < MR; ++r) {
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][c]), sc, acc[r][c]);
                if (kAcross) dot[r][c] = _mm512_setzero_si512();
            }
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            const __m512 lanes = minus_zero_products(acc[r][c], w, j + c, a.qsum + r * a.ldg, ng);
            out[r * ldo + j + c] = a.sx[r] * _mm512_reduce_add_ps(lanes);
        }
    }
}

// MR activation rows against every weight row, NR at a time.
template <int MR, int NR, bool kAcross>
void tile_rows(const W4a8Rows& a, const Int4Weights& w, float* out, int64_t ldo, const GroupWalk& walk) {
    int64_t j = 0;
    for (; j + NR <= w.n; j += NR) tile_block<MR, NR, kAcross>(a, w, j, out, ldo, walk, j + 2 * NR <= w.n);
    for (; j < w.n; ++j) tile_block<MR, 1, kAcross>(a, w, j, out, ldo, walk, false);
}

// Every row of a: blocks of 4, then the rest. kAcross tiles hold twice the accumulators.
template <bool kAcross>
void tile_all(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo, const GroupWalk& walk) {
    constexpr int kWide = kAcross ? 2 : 4;  // weight rows per tile at 2-4 activation rows
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) tile_rows<4, kWide, kAcross>(rows_from(a, i), w, out + i * ldo, ldo, walk);
    switch (m - i) {
        case 1:
            tile_rows<1, 4, kAcross>(rows_from(a, i), w, out + i * ldo, ldo, walk);
            break;
        case 2:
            tile_rows<2, kAcross ? 3 : 4, kAcross>(rows_from(a, i), w, out + i * ldo, ldo, walk);
            break;
        case 3:
            tile_rows<3, kWide, kAcross>(rows_from(a, i), w, out + i * ldo, ldo, walk);
            break;
        default:
            break;
    }
}

}  // namespace

void matmul_tile_w4a8_avx512(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo) {
    if (!w4a8_vector_shape(w)) {
        matmul_tile_w4a8_ref(a, m, w, out, ldo);
        return;
    }
    const GroupWalk walk = group_walk(w, groups_of(w));
    if (walk.wide && walk.chunks_per_group > 1) {
        tile_all<true>(a, m, w, out, ldo, walk);
    } else {
        tile_all<false>(a, m, w, out, ldo, walk);
    }
}

}  // namespace moeserve::kernels::cpu::detail
