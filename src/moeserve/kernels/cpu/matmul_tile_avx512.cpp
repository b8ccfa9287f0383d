// Single-threaded AVX-512 matmul tile for bf16 weights (built with -mavx512bf16 etc.; only
// called when active_isa() >= avx512).
//   GEMV (m <= kGemvMaxRows, decode): the weights widened to f32 in registers (two integer ops
//     per 32 weights), f32 FMA: f32 accuracy, memory-bound up to a few rows.
//   GEMM (prefill): by default weight panels widened to f32 and f32 FMA (f32 accuracy); with
//     MOESERVE_BF16_ACTIVATIONS=round, packed bf16-pair panels and vdpbf16ps with x rounded to
//     bf16 once.
// NOTE: no std or project inline code here (see matmul_tile_isa.h): helpers live in this
// anonymous namespace, buffers come from thread_scratch().
#include <immintrin.h>

#include <cstdint>

#include "moeserve/kernels/cpu/matmul_tile.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }
inline __mmask32 tail_mask32(int64_t n) { return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1; }
inline __mmask16 tail_mask16(int64_t n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// c[0, 32) (+)= the 32 floats v0 | v1, only the lanes masks m0 (c[0, 16)) and m1 (c[16, 32)) keep.
inline void store_row32(float* c, __m512 v0, __m512 v1, __mmask16 m0, __mmask16 m1, bool accumulate) {
    if (accumulate) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
}

// x [m, k] (row stride ldx) rounded to bf16 rows [m, kp] (kp a multiple of 32, zero past k):
// 2^-9 relative per element.
void round_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint16_t* xb) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < kp; p += 16) {
            const __m512 r = _mm512_maskz_loadu_ps(tail_mask16(k - p), x + i * ldx + p);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(xb + i * kp + p), (__m256i)_mm512_cvtneps_pbh(r));
        }
    }
}

// ---- GEMV (m <= kGemvMaxRows, decode): f32 FMA on widened weights. ----
// A zmm of 32 bf16 weights, read as 16 32-bit lanes, holds the even-indexed weights in the low
// halves and the odd-indexed ones in the high halves: a shift left by 16 and a mask of the high
// halves widen both to exact f32 with two cheap integer ops (no shuffles). x is laid out to
// match once per call: each 32-element block of a row as its 16 even then its 16 odd elements,
// in f32, so the products and sums are f32 FMA, as accurate as the AVX2 path. (The three-part
// bf16 split with vdpbf16ps, this kernel's predecessor, needed 3 x loads and 3 vdpbf16ps per 32
// weights and each extra row of x added 3 more: at m = 4 it read at 0.33 of the STREAM rate,
// below the AVX2 GEMV; see docs/kernels.md.)
// Blocking (linear_bench and a standalone probe, 2 threads; docs/kernels.md):
// - Up to k < kGemvRowBlockMinK, for m <= 3: on AMD Zen4 one weight row at a time (one
//   sequential stream for the prefetcher: interleaved rows of 2 KiB each read at about half the
//   rate there); on Intel Xeon that left 15-25% of the read rate unused, and 4 interleaved rows
//   with the next 4 prefetched read fastest (the `row_blocks` choice, isa.h gemv_row_blocks()).
//   From m = 4 the FMAs take long enough that the hardware prefetcher falls behind, so two rows
//   at a time with the next pair's lines prefetched (as the AVX2 GEMV does).
// - From k = kGemvRowBlockMinK (rows of 4 KiB and more) four rows at a time (two above 4 rows of
//   x, for the registers): x (4 k bytes per row) no longer stays in L1 next to the weight stream,
//   and each x load then feeds several rows.
constexpr int64_t kGemvRowBlockMinK = 2048;

// xs[i * kp + b + l] = x[i, b + 2l], xs[i * kp + b + 16 + l] = x[i, b + 2l + 1] for each 32-block b,
// zero past k.
void split_even_odd(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, float* xs) {
    const __m512i even_idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd_idx = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx;
        float* di = xs + i * kp;
        for (int64_t b = 0; b < kp; b += 32) {
            const __m512 lo = _mm512_maskz_loadu_ps(tail_mask16(k - b), xi + b);
            const __m512 hi = _mm512_maskz_loadu_ps(tail_mask16(k - b - 16), xi + b + 16);
            _mm512_store_ps(di + b, _mm512_permutex2var_ps(lo, even_idx, hi));
            _mm512_store_ps(di + b + 16, _mm512_permutex2var_ps(lo, odd_idx, hi));
        }
    }
}

// out[i, j] for MR rows of x and NR weight rows at a time; A accumulators per (i, r) pair: 2 (even
// and odd products apart) when MR * NR is small, so enough FMA chains are in flight, else 1.
template <int MR, int NR, bool kPrefetch>
void gemv_block_rows(const float* xs, int64_t kp, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo) {
    constexpr int A = MR * NR <= 8 ? 2 : 1;
    const __m512i high_halves = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    const int64_t k32 = k & ~int64_t{31};
    const __mmask32 tail = tail_mask32(k - k32);
    for (int64_t j = 0; j + NR <= n; j += NR) {
        const uint16_t* wj = w + j * k;
        __m512 acc[MR][NR][A];
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int r = 0; r < NR; ++r)
#pragma GCC unroll 2
                for (int a = 0; a < A; ++a) acc[i][r][a] = _mm512_setzero_ps();
        for (int64_t p = 0; p < k; p += 32) {
            if constexpr (kPrefetch) {
#pragma GCC unroll 4
                for (int r = 0; r < NR; ++r)
                    _mm_prefetch(reinterpret_cast<const char*>(wj + (NR + r) * k + p), _MM_HINT_T0);
            }
            const __mmask32 mask = p < k32 ? ~__mmask32{0} : tail;
#pragma GCC unroll 4
            for (int r = 0; r < NR; ++r) {
                const __m512i wv = _mm512_maskz_loadu_epi16(mask, wj + r * k + p);
                const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
                const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(wv, high_halves));
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i) {
                    const float* xi = xs + i * kp + p;
                    acc[i][r][0] = _mm512_fmadd_ps(we, _mm512_load_ps(xi), acc[i][r][0]);
                    acc[i][r][A - 1] = _mm512_fmadd_ps(wo, _mm512_load_ps(xi + 16), acc[i][r][A - 1]);
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int r = 0; r < NR; ++r) {
                const __m512 a = A == 2 ? _mm512_add_ps(acc[i][r][0], acc[i][r][A - 1]) : acc[i][r][0];
                out[i * ldo + j + r] = _mm512_reduce_add_ps(a);
            }
    }
}

// All n weight rows for MR rows of x: blocks of NR, the last n % NR rows one at a time.
template <int MR, int NR, bool kPrefetch>
void gemv_rows(const float* xs, int64_t kp, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo) {
    const int64_t blocked = n / NR * NR;
    gemv_block_rows<MR, NR, kPrefetch>(xs, kp, k, w, blocked, out, ldo);
    if (blocked < n) gemv_block_rows<MR, 1, false>(xs, kp, k, w + blocked * k, n - blocked, out + blocked, ldo);
}

template <int MR, bool kRowBlocks>
void gemv_m(const float* xs, int64_t kp, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo) {
    if (k >= kGemvRowBlockMinK) {
        // 4 rows up to MR = 4 (16 accumulators), 2 above (up to 16: the 32 zmm also hold w and x)
        gemv_rows<MR, (MR <= 4 ? 4 : 2), (MR >= 4)>(xs, kp, k, w, n, out, ldo);
    } else if constexpr (MR >= 4) {
        gemv_rows<MR, 2, true>(xs, kp, k, w, n, out, ldo);
    } else if constexpr (kRowBlocks) {
        gemv_rows<MR, 4, true>(xs, kp, k, w, n, out, ldo);
    } else {
        gemv_rows<MR, 1, false>(xs, kp, k, w, n, out, ldo);
    }
}

void gemv(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo,
          bool row_blocks) {
    const int64_t kp = (k + 31) / 32 * 32;
    auto* xs = static_cast<float*>(thread_scratch(0, m * kp * 4));
    split_even_odd(x, ldx, m, k, kp, xs);
    // One instantiation per row count 1..kGemvMaxRows (the caller guarantees 1 <= m <= 8), for
    // each way of reading the weights at m <= 3.
    using GemvRows = void (*)(const float*, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t);
    static constexpr GemvRows kByRows[2][kGemvMaxRows] = {
        {gemv_m<1, false>, gemv_m<2, false>, gemv_m<3, false>, gemv_m<4, false>, gemv_m<5, false>, gemv_m<6, false>,
         gemv_m<7, false>, gemv_m<8, false>},
        {gemv_m<1, true>, gemv_m<2, true>, gemv_m<3, true>, gemv_m<4, true>, gemv_m<5, true>, gemv_m<6, true>,
         gemv_m<7, true>, gemv_m<8, true>}};
    kByRows[row_blocks ? 1 : 0][m - 1](xs, kp, k, w, n, out, ldo);
}

// ---- GEMM (m > kGemvMaxRows, prefill): bf16 pairs. ----
// Only with MOESERVE_BF16_ACTIVATIONS=round (the default prefill is gemm_f32 below): x rounded
// to bf16 once (2^-9 relative per element, what llama.cpp does for bf16 weights; logits off by
// ~1e-3 relative), twice the f32-FMA rate per instruction. Weights are packed per block into
// panels of 32 rows x kc as bf16 pairs: panel[q * 32 + c] = (w[c, 2q], w[c, 2q+1]) as one 32-bit
// word, so a micro-kernel step is two 64-byte loads, one broadcast pair of x per row and two
// vdpbf16ps per row, MR x 32 outputs in 2 * MR zmm accumulators. Callers that run several tiles
// over the same rows (each expert's row blocks, a linear's column chunks) round them once
// (round_rows_bf16_avx512) and call matmul_tile_rounded_avx512: rounding inside every tile cost a
// fifth of the prefill on Zen5. On the Intel Xeon measured it is slower than gemm_f32.
constexpr int64_t kKc = 512;  // k per block (256 pairs): an 8-row x block is 8 KiB in L1
constexpr int64_t kNc = 128;  // weight rows per packed block: 128 KiB of pairs in L2
constexpr int kPr = 32;       // panel width (2 zmm of f32 outputs)
constexpr int kMr = 8;

// dst[q * 32 + c] = bf16 pair (w[c, p0 + 2q], w[c, p0 + 2q + 1]), zero past k and past `rows`.
void pack_panel(const uint16_t* w, int64_t k, int64_t rows, int64_t p0, int64_t kc, uint32_t* dst) {
    const int64_t pairs = (kc + 1) / 2;
    const int64_t full = kc / 2;  // pairs with both elements inside the block (and inside k)
    for (int64_t c = 0; c < kPr; ++c) {
        if (c >= rows) {
            for (int64_t q = 0; q < pairs; ++q) dst[q * kPr + c] = 0;
            continue;
        }
        const uint16_t* wc = w + c * k + p0;
        for (int64_t q = 0; q < full; ++q) {
            dst[q * kPr + c] = uint32_t{wc[2 * q]} | (uint32_t{wc[2 * q + 1]} << 16);
        }
        if (full < pairs) dst[full * kPr + c] = uint32_t{wc[2 * full]};
    }
}

// c[MR, ncols] (+)= x pairs [MR, pairs] (row stride ldxa words) @ panel [pairs, 32].
template <int MR>
void micro_kernel(const uint32_t* xs, int64_t ldxa, const uint32_t* b, int64_t pairs, float* c, int64_t ldc,
                  int64_t ncols, bool accumulate) {
    __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
    for (int64_t q = 0; q < pairs; ++q) {
        const __m512bh b0 = as_bh(_mm512_load_si512(b + q * kPr));
        const __m512bh b1 = as_bh(_mm512_load_si512(b + q * kPr + 16));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512bh a = as_bh(_mm512_set1_epi32(static_cast<int>(xs[i * ldxa + q])));
            acc0[i] = _mm512_dpbf16_ps(acc0[i], a, b0);
            acc1[i] = _mm512_dpbf16_ps(acc1[i], a, b1);
        }
    }
    const __mmask16 m0 = tail_mask16(ncols), m1 = tail_mask16(ncols - 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) store_row32(c + i * ldc, acc0[i], acc1[i], m0, m1, accumulate);
}

using MicroPairs = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, float*, int64_t, int64_t, bool);
// One instantiation per row count 1..kMr.
constexpr MicroPairs kMicroPairsByRows[] = {micro_kernel<1>, micro_kernel<2>, micro_kernel<3>, micro_kernel<4>,
                                            micro_kernel<5>, micro_kernel<6>, micro_kernel<7>, micro_kernel<8>};
static_assert(sizeof(kMicroPairsByRows) / sizeof(kMicroPairsByRows[0]) == kMr);

// x as bf16 rows (xb, row stride kp = k rounded up to 32, zero past k).
void gemm_pairs(const uint16_t* xb, int64_t kp, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                int64_t ldo, uint32_t* pack) {
    const auto* xs = reinterpret_cast<const uint32_t*>(xb);
    const int64_t ldxa = kp / 2;
    // Equal k blocks of even length (k = 1024: two of 512; 384: one).
    const int64_t num_kb = (k + kKc - 1) / kKc;
    const int64_t kc_even = ((k + num_kb - 1) / num_kb + 1) / 2 * 2;
    for (int64_t j0 = 0; j0 < n; j0 += kNc) {
        const int64_t nc = imin(kNc, n - j0);
        const int64_t num_panels = (nc + kPr - 1) / kPr;
        for (int64_t p0 = 0; p0 < k; p0 += kc_even) {
            const int64_t kc = imin(kc_even, k - p0), pairs = (kc + 1) / 2;
            for (int64_t q = 0; q < num_panels; ++q) {
                pack_panel(w + (j0 + q * kPr) * k, k, imin(kPr, nc - q * kPr), p0, kc, pack + q * pairs * kPr);
            }
            for (int64_t i0 = 0; i0 < m; i0 += kMr) {
                const MicroPairs micro = kMicroPairsByRows[imin(kMr, m - i0) - 1];
                const int64_t xo = i0 * ldxa + p0 / 2;
                for (int64_t q = 0; q < num_panels; ++q) {
                    micro(xs + xo, ldxa, pack + q * pairs * kPr, pairs, out + i0 * ldo + j0 + q * kPr, ldo,
                          imin(kPr, nc - q * kPr), p0 > 0);
                }
            }
        }
    }
}

// The pack buffer is 32-byte aligned at best; the panels want 64 for aligned loads.
void* align64(float* pack) {
    const auto addr = reinterpret_cast<uintptr_t>(pack);
    return reinterpret_cast<void*>((addr + 63) & ~uintptr_t{63});
}

// ---- GEMM (m > kGemvMaxRows, prefill), f32 accuracy: the default. ----
// The weights of a block are widened to f32 and packed into panels of 32 rows x kc, laid out
// [kc][32], so a micro-kernel step is two 64-byte loads of the panel, one broadcast of x per row
// and two FMAs per row: MR x 32 outputs in 2 * MR zmm accumulators (24 of the 32 registers at
// MR = 12). Products and sums are f32 FMA, as in the AVX2 GEMM (same accuracy), with twice the
// work per instruction and twice the accumulators: 1.7-1.8x the AVX2 GEMM on an Intel Xeon with
// two 512-bit FMA units per core (docs/performance.md); not measured yet on Zen4, whose 512-bit
// FMAs are split in two.
constexpr int64_t kF32Kc = 256;  // k per block: a 12-row x block is 12 KiB in L1
constexpr int64_t kF32Nc = 256;  // weight rows per packed block: 256 KiB of f32 panels in L2
constexpr int kF32Nr = 32;       // panel width (2 zmm of outputs)
constexpr int kF32Mr = 12;

// 16 zmm rows r[c] (16 floats each) -> r[q] holds element q of every row (a 16 x 16 transpose):
// unpack pairs of floats, then pairs of doubles (a 4 x 4 transpose inside each 128-bit lane),
// then gather the lanes of the four row groups with two rounds of 128-bit shuffles.
void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 16; g += 4) {
        // lane L of u[g + j]: element 4L + j of rows g .. g + 3
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        // lanes (0, 2) and (1, 3) of row groups 0 and 1, then of row groups 2 and 3
        const __m512 v_even = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        const __m512 v_odd = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        const __m512 w_even = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        const __m512 w_odd = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(v_even, w_even, 0x88);      // element j
        r[8 + j] = _mm512_shuffle_f32x4(v_even, w_even, 0xDD);  // element 8 + j
        r[4 + j] = _mm512_shuffle_f32x4(v_odd, w_odd, 0x88);    // element 4 + j
        r[12 + j] = _mm512_shuffle_f32x4(v_odd, w_odd, 0xDD);   // element 12 + j
    }
}

// dst[p * 32 + c] = f32(w[c * k + p0 + p]) for p < kc, c < 32; zero for c >= rows. dst is 64-byte
// aligned; columns are widened and transposed 16 x 16 at a time.
void pack_panel_f32(const uint16_t* w, int64_t k, int64_t rows, int64_t p0, int64_t kc, float* dst) {
    for (int64_t c0 = 0; c0 < kF32Nr; c0 += 16) {
        const int64_t live = rows - c0;  // weight rows present in this half (may be <= 0)
        for (int64_t p = 0; p < kc; p += 16) {
            const __mmask16 km = tail_mask16(kc - p);
            __m512 r[16];
#pragma GCC unroll 16
            for (int c = 0; c < 16; ++c) {
                const __m256i h =
                    c < live ? _mm256_maskz_loadu_epi16(km, w + (c0 + c) * k + p0 + p) : _mm256_setzero_si256();
                r[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            }
            transpose16(r);
            const int64_t steps = imin(16, kc - p);
            for (int64_t q = 0; q < steps; ++q) _mm512_store_ps(dst + (p + q) * kF32Nr + c0, r[q]);
        }
    }
}

// c[MR, ncols] (+)= a[MR, kc] (row stride lda) @ b[kc, 32] (a packed panel).
template <int MR>
void micro_kernel_f32(const float* a, int64_t lda, const float* b, int64_t kc, float* c, int64_t ldc, int64_t ncols,
                      bool accumulate) {
    __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; ++p) {
        const __m512 b0 = _mm512_load_ps(b + p * kF32Nr);
        const __m512 b1 = _mm512_load_ps(b + p * kF32Nr + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; ++i) {
            const __m512 av = _mm512_set1_ps(a[i * lda + p]);
            acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
            acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
        }
    }
    const __mmask16 m0 = tail_mask16(ncols), m1 = tail_mask16(ncols - 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) store_row32(c + i * ldc, acc0[i], acc1[i], m0, m1, accumulate);
}

using MicroF32 = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, bool);
// One instantiation per row count 1..kF32Mr.
constexpr MicroF32 kMicroF32ByRows[] = {micro_kernel_f32<1>,  micro_kernel_f32<2>,  micro_kernel_f32<3>,
                                        micro_kernel_f32<4>,  micro_kernel_f32<5>,  micro_kernel_f32<6>,
                                        micro_kernel_f32<7>,  micro_kernel_f32<8>,  micro_kernel_f32<9>,
                                        micro_kernel_f32<10>, micro_kernel_f32<11>, micro_kernel_f32<12>};
static_assert(sizeof(kMicroF32ByRows) / sizeof(kMicroF32ByRows[0]) == kF32Mr);

// The int4 weights of gemm_int4_avx512 (matmul_tile_isa.h).
struct Int4Codes {
    const uint8_t* codes;
    const float *scale, *zero;
    int64_t k, group_size;
};

// pack_panel_f32 for int4 weights: dst[p * 32 + c] = scale * (code - zero) of row j + c, column
// p0 + p (p0, kc multiples of 16, so each 16 columns lie in one group).
void pack_panel_int4(const Int4Codes& w, int64_t j, int64_t rows, int64_t p0, int64_t kc, float* dst) {
    const int64_t ng = (w.k + w.group_size - 1) / w.group_size;  // int4_groups: the last may be short
    const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    for (int64_t c0 = 0; c0 < kF32Nr; c0 += 16) {
        const int64_t live = rows - c0;
        for (int64_t p = 0; p < kc; p += 16) {
            const int64_t col = p0 + p, g = col / w.group_size;
            __m512 r[16];
#pragma GCC unroll 16
            for (int c = 0; c < 16; ++c) {
                if (c >= live) {
                    r[c] = _mm512_setzero_ps();
                    continue;
                }
                const int64_t row = j + c0 + c;
                // 8 bytes, each twice, one per 32-bit lane: lane 2 l + h keeps nibble h of byte l
                const __m128i bytes =
                    _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.codes + row * (w.k / 2) + col / 2));
                const __m512i codes =
                    _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes)), shifts),
                                     _mm512_set1_epi32(0x0F));
                r[c] = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(codes), _mm512_set1_ps(w.zero[row * ng + g])),
                                     _mm512_set1_ps(w.scale[row * ng + g]));
            }
            transpose16(r);
#pragma GCC unroll 16
            for (int q = 0; q < 16; ++q) _mm512_store_ps(dst + (p + q) * kF32Nr + c0, r[q]);
        }
    }
}

// x [m, k] @ the n weight rows pack_rows packs (pack_rows(j, rows, p0, kc, dst): pack_panel_f32's
// layout), f32 FMA. pack: 64-byte aligned, kF32Kc * kF32Nc floats.
template <class PackRows>
void gemm_f32_panels(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t n, float* out, int64_t ldo, float* pack,
                     PackRows pack_rows) {
    // Equal k blocks (k = 1024: four of 256; 384: two of 192) rather than a short last one.
    const int64_t num_kb = (k + kF32Kc - 1) / kF32Kc;
    const int64_t kc_even = ((k + num_kb - 1) / num_kb + 15) / 16 * 16;
    for (int64_t j0 = 0; j0 < n; j0 += kF32Nc) {
        const int64_t nc = imin(kF32Nc, n - j0);
        const int64_t num_panels = (nc + kF32Nr - 1) / kF32Nr;
        for (int64_t p0 = 0; p0 < k; p0 += kc_even) {
            const int64_t kc = imin(kc_even, k - p0);
            for (int64_t q = 0; q < num_panels; ++q) {
                pack_rows(j0 + q * kF32Nr, imin(kF32Nr, nc - q * kF32Nr), p0, kc, pack + q * kc * kF32Nr);
            }
            for (int64_t i0 = 0; i0 < m; i0 += kF32Mr) {
                const MicroF32 micro = kMicroF32ByRows[imin(kF32Mr, m - i0) - 1];
                for (int64_t q = 0; q < num_panels; ++q) {
                    micro(x + i0 * ldx + p0, ldx, pack + q * kc * kF32Nr, kc, out + i0 * ldo + j0 + q * kF32Nr, ldo,
                          imin(kF32Nr, nc - q * kF32Nr), p0 > 0);
                }
            }
        }
    }
}

void gemm_f32(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo,
              float* pack) {
    gemm_f32_panels(x, ldx, m, k, n, out, ldo, pack, [&](int64_t j, int64_t rows, int64_t p0, int64_t kc, float* dst) {
        pack_panel_f32(w + j * k, k, rows, p0, kc, dst);
    });
}

}  // namespace

int64_t matmul_pack_floats_avx512() {
    const int64_t pairs_gemm = kNc * (kKc / 2), f32_gemm = kF32Nc * kF32Kc;
    return (pairs_gemm > f32_gemm ? pairs_gemm : f32_gemm) + 16;  // + 16: room to align to 64 bytes
}

void matmul_tile_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                        int64_t ldo, float* pack, Avx512Bf16Options options) {
    if (m <= 0 || n <= 0) return;
    if (m <= kGemvMaxRows) {
        gemv(x, ldx, m, k, w, n, out, ldo, options.gemv_row_blocks);
        return;
    }
    if (options.round_x) {
        const int64_t kp = rounded_row_stride(k);
        auto* xb = static_cast<uint16_t*>(thread_scratch(1, m * kp * 2));
        round_rows(x, ldx, m, k, kp, xb);
        gemm_pairs(xb, kp, m, k, w, n, out, ldo, static_cast<uint32_t*>(align64(pack)));
    } else {
        gemm_f32(x, ldx, m, k, w, n, out, ldo, static_cast<float*>(align64(pack)));
    }
}

void gemm_int4_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, const uint8_t* codes, const float* scale,
                      const float* zero, int64_t group_size, int64_t n, float* out, int64_t ldo, float* pack) {
    if (m <= 0 || n <= 0) return;
    const Int4Codes w{codes, scale, zero, k, group_size};
    gemm_f32_panels(
        x, ldx, m, k, n, out, ldo, static_cast<float*>(align64(pack)),
        [&](int64_t j, int64_t rows, int64_t p0, int64_t kc, float* dst) { pack_panel_int4(w, j, rows, p0, kc, dst); });
}

void round_rows_bf16_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* xb) {
    round_rows(x, ldx, m, k, rounded_row_stride(k), xb);
}

void matmul_tile_rounded_avx512(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                                int64_t ldo, float* pack) {
    if (m <= 0 || n <= 0) return;
    gemm_pairs(xb, rounded_row_stride(k), m, k, w, n, out, ldo, static_cast<uint32_t*>(align64(pack)));
}

}  // namespace moeserve::kernels::cpu::detail
