// The AVX-512 tile over bf16 panels (bf16_panels.h; built with -mavx512*, only called when
// active_isa() >= avx512). Per group of 32 weights (one input column of a panel): one aligned
// 64-byte load, a shift and a mask widen them to two zmm of exact f32 (rows 0-15, rows 16-31),
// then per row of x one broadcast and two f32 FMAs. MR x 32 outputs live in 2 MR accumulators.
// NOTE: no std or project inline code here (see matmul_tile_isa.h): helpers live in this
// anonymous namespace.
#include <immintrin.h>

#include <cstdint>

#include "moeserve/kernels/cpu/bf16_panels.h"

namespace moeserve::kernels::cpu::detail {
namespace {

constexpr int64_t kGroup = kBf16PanelRows;  // bf16 per input column of a panel
constexpr int kMr = static_cast<int>(kBf16PanelGemvRows);
// GEMM (more than kMr rows): x in blocks of kRowBlock rows, k in chunks of kKChunk, so a panel's
// chunk (16 KiB) stays in L1 for every kMr-row step of the block and the block's x chunk
// (96 KiB) in L2.
constexpr int64_t kRowBlock = 8 * kMr;
constexpr int64_t kKChunk = 256;

// Groups prefetched ahead (8 KiB): the hardware prefetchers alone left a thread reading its
// stream at about half the STREAM rate once the FMAs of 4-8 rows sat between the loads
// (linear_bench, lm_head at m = 4 / 8, Zen5: 0.60 / 0.45 of STREAM without, 0.95 / 0.70 with; 2
// and 4 KiB ahead were in between, 16 KiB no better). Past a panel's end it reads the next one.
constexpr int64_t kAhead = 128;
inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline __mmask16 lane_mask(int64_t n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// out[i][0, cols) (+)= sum over p in [p0, p1) of x[i][p] * panel row (0..31) at p, for MR rows.
// Up to 4 rows, two accumulator sets (even and odd p): with 2 MR FMAs per column, one set would
// wait on the FMA latency.
template <int MR>
void panel_rows(const uint16_t* panel, int64_t p0, int64_t p1, const float* x, int64_t ldx, float* out, int64_t ldo,
                int64_t cols, bool accumulate) {
    constexpr int kSets = MR <= 4 ? 2 : 1;
    __m512 acc[kSets][MR][2];
#pragma GCC unroll 2
    for (int s = 0; s < kSets; ++s) {
#pragma GCC unroll 12
        for (int i = 0; i < MR; ++i) acc[s][i][0] = acc[s][i][1] = _mm512_setzero_ps();
    }
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    int64_t p = p0;
    for (; p + kSets <= p1; p += kSets) {
#pragma GCC unroll 2
        for (int s = 0; s < kSets; ++s) {
            _mm_prefetch(reinterpret_cast<const char*>(panel + (p + s + kAhead) * kGroup), _MM_HINT_T0);
            const __m512i w = _mm512_load_si512(panel + (p + s) * kGroup);
            const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
            const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(w, high));
#pragma GCC unroll 12
            for (int i = 0; i < MR; ++i) {
                const __m512 xb = _mm512_set1_ps(x[i * ldx + p + s]);
                acc[s][i][0] = _mm512_fmadd_ps(lo, xb, acc[s][i][0]);
                acc[s][i][1] = _mm512_fmadd_ps(hi, xb, acc[s][i][1]);
            }
        }
    }
    if (p < p1) {  // one column left (two sets, odd length)
        const __m512i w = _mm512_load_si512(panel + p * kGroup);
        const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(w, high));
#pragma GCC unroll 12
        for (int i = 0; i < MR; ++i) {
            const __m512 xb = _mm512_set1_ps(x[i * ldx + p]);
            acc[0][i][0] = _mm512_fmadd_ps(lo, xb, acc[0][i][0]);
            acc[0][i][1] = _mm512_fmadd_ps(hi, xb, acc[0][i][1]);
        }
    }
    const __mmask16 m0 = lane_mask(cols), m1 = lane_mask(cols - 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
        __m512 v0 = acc[0][i][0], v1 = acc[0][i][1];
        if constexpr (kSets == 2) {
            v0 = _mm512_add_ps(v0, acc[1][i][0]);
            v1 = _mm512_add_ps(v1, acc[1][i][1]);
        }
        float* o = out + i * ldo;
        if (accumulate) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, o));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, o + 16));
        }
        _mm512_mask_storeu_ps(o, m0, v0);
        _mm512_mask_storeu_ps(o + 16, m1, v1);
    }
}

using PanelRows = void (*)(const uint16_t*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t, bool);
// One instantiation per row count 1..kMr.
constexpr PanelRows kPanelRowsByRows[] = {panel_rows<1>, panel_rows<2>,  panel_rows<3>,  panel_rows<4>,
                                          panel_rows<5>, panel_rows<6>,  panel_rows<7>,  panel_rows<8>,
                                          panel_rows<9>, panel_rows<10>, panel_rows<11>, panel_rows<12>};
static_assert(sizeof(kPanelRowsByRows) / sizeof(kPanelRowsByRows[0]) == kMr);

}  // namespace

void bf16_panels_tile_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* panels, int64_t q0,
                             int64_t q1, int64_t n, float* out, int64_t ldo) {
    if (m <= kMr) {  // each panel read once, whole, for all rows: one sequential stream
        const PanelRows run = kPanelRowsByRows[m - 1];
        for (int64_t q = q0; q < q1; ++q) {
            run(panels + q * k * kGroup, 0, k, x, ldx, out + (q - q0) * kGroup, ldo, imin(kGroup, n - q * kGroup),
                false);
        }
        return;
    }
    for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
        const int64_t i1 = imin(m, i0 + kRowBlock);
        for (int64_t q = q0; q < q1; ++q) {
            const uint16_t* panel = panels + q * k * kGroup;
            const int64_t cols = imin(kGroup, n - q * kGroup);
            for (int64_t p0 = 0; p0 < k; p0 += kKChunk) {
                const int64_t p1 = imin(k, p0 + kKChunk);
                for (int64_t i = i0; i < i1; i += kMr) {
                    kPanelRowsByRows[imin(kMr, i1 - i) - 1](panel, p0, p1, x + i * ldx, ldx,
                                                            out + i * ldo + (q - q0) * kGroup, ldo, cols, p0 > 0);
                }
            }
        }
    }
}

}  // namespace moeserve::kernels::cpu::detail
