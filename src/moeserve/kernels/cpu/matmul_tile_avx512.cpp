// Single-threaded AVX-512 BF16 matmul tile for bf16 weights (built with -mavx512bf16 etc.; only
// called when active_isa() >= avx512). vdpbf16ps multiplies 32 bf16 weights by 32 bf16
// activations per instruction, so the weights are never widened; the activations are split into
// bf16 parts (x = hi + mid + lo) that are each multiplied by the same weights, products of two
// bf16 being exact in f32.
//   GEMV (m <= kGemvMaxRows, decode): 3 parts, f32 accuracy; memory-bound, so the 3 products
//     cost nothing measurable.
//   GEMM (prefill): the AVX2 f32 GEMM by default; with MOESERVE_BF16_ACTIVATIONS=round, packed
//     bf16-pair panels with x rounded once (1 part).
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

// x [m, k] (row stride ldx) as P bf16 rows [m, kp] each (kp a multiple of 32, zero past k):
// part 0 = bf16(x), part p = bf16(x - parts 0..p-1). Each rounding keeps 8 more bits, so
// |x - sum of P parts| <= 2^(-9P) |x| (P = 3: below f32's own rounding).
template <int P>
void split_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint16_t* parts) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < kp; p += 16) {
            __m512 r = _mm512_maskz_loadu_ps(tail_mask16(k - p), x + i * ldx + p);
#pragma GCC unroll 3
            for (int q = 0; q < P; ++q) {
                const __m256bh h = _mm512_cvtneps_pbh(r);
                _mm256_store_si256(reinterpret_cast<__m256i*>(parts + (q * m + i) * kp + p), (__m256i)h);
                const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
                r = _mm512_sub_ps(r, hf);
            }
        }
    }
}

// GEMV: rows of w one at a time, so the weights are read as one sequential stream (the hardware
// prefetcher follows it at the full read rate; NR interleaved rows of a few KiB each made it
// stop and restart for every row block, at about half the rate). MR rows of x share each weight
// row (hot in L1 for the later rows); U independent accumulators per row hide the vdpbf16ps
// latency. x comes as P bf16 parts (xs: part q of row i at xs + (q * mp + i) * kp), each
// multiplied by the same weight vector: P = 3, so the result has f32 accuracy. No software
// prefetch: measured (1 thread, 256 MiB, thread CPU time) it was no faster at 4 KiB ahead and
// slower at 0.5-2 KiB.
constexpr int kGemvParts = 3;

template <int MR, int U>
void gemv_seq_rows(const uint16_t* xs, int64_t mp, int64_t kp, int64_t k, const uint16_t* w, int64_t n, float* out,
                   int64_t ldo) {
    constexpr int P = kGemvParts;
    const int64_t k32 = k & ~int64_t{31};
    const __mmask32 tail = tail_mask32(k - k32);
    auto xpart = [&](int q, int i, int64_t p) { return as_bh(_mm512_load_si512(xs + (q * mp + i) * kp + p)); };
    for (int64_t j = 0; j < n; ++j) {
        const uint16_t* wj = w + j * k;
        __m512 acc[MR][U];
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) acc[i][u] = _mm512_setzero_ps();
        int64_t p = 0;
        for (; p + 32 * U <= k32; p += 32 * U) {
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) {
                const int64_t o = p + 32 * u;
                const __m512bh wv = as_bh(_mm512_loadu_si512(wj + o));
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i)
#pragma GCC unroll 3
                    for (int q = 0; q < P; ++q) acc[i][u] = _mm512_dpbf16_ps(acc[i][u], xpart(q, i, o), wv);
            }
        }
        for (; p < k; p += 32) {
            const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(p + 32 <= k ? ~__mmask32{0} : tail, wj + p));
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i)
#pragma GCC unroll 3
                for (int q = 0; q < P; ++q) acc[i][0] = _mm512_dpbf16_ps(acc[i][0], xpart(q, i, p), wv);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            __m512 a = acc[i][0];
#pragma GCC unroll 4
            for (int u = 1; u < U; ++u) a = _mm512_add_ps(a, acc[i][u]);
            out[i * ldo + j] = _mm512_reduce_add_ps(a);
        }
    }
}

void gemv(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo) {
    const int64_t kp = (k + 31) / 32 * 32;
    auto* xs = static_cast<uint16_t*>(thread_scratch(0, kGemvParts * m * kp * 2));
    split_rows<kGemvParts>(x, ldx, m, k, kp, xs);
    for (int64_t i = 0; i < m; i += 4) {
        const uint16_t* xi = xs + i * kp;
        switch (imin(4, m - i)) {
            case 1:
                gemv_seq_rows<1, 4>(xi, m, kp, k, w, n, out + i * ldo, ldo);
                break;
            case 2:
                gemv_seq_rows<2, 2>(xi, m, kp, k, w, n, out + i * ldo, ldo);
                break;
            case 3:
                gemv_seq_rows<3, 2>(xi, m, kp, k, w, n, out + i * ldo, ldo);
                break;
            default:
                gemv_seq_rows<4, 1>(xi, m, kp, k, w, n, out + i * ldo, ldo);
                break;
        }
    }
}

// ---- GEMM (m > kGemvMaxRows, prefill): bf16 pairs. ----
// Only with MOESERVE_BF16_ACTIVATIONS=round (the default prefill is the AVX2 f32 GEMM, see
// matmul_tile_avx512 below): x rounded to bf16 once (2^-9 relative per element, what llama.cpp
// does for bf16 weights; logits off by ~1e-3 relative), twice the f32-FMA rate per instruction.
// Weights are packed per block into panels of 32 rows x kc as bf16 pairs: panel[q * 32 + c] =
// (w[c, 2q], w[c, 2q+1]) as one 32-bit word, so a micro-kernel step is two 64-byte loads, one
// broadcast pair of x per row and two vdpbf16ps per row, MR x 32 outputs in 2 * MR zmm
// accumulators. (The kernel takes x as P bf16 parts; P = 1 is the one used.)
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

// c[MR, ncols] (+)= x pairs [MR, pairs] @ panel [pairs, 32], x as P parts (part q of row i at
// xs + (q * mp + i) * ldxa words), each multiplied by the same panel step.
template <int MR, int P>
void micro_kernel(const uint32_t* xs, int64_t mp, int64_t ldxa, const uint32_t* b, int64_t pairs, float* c, int64_t ldc,
                  int64_t ncols, bool accumulate) {
    __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
    for (int64_t q = 0; q < pairs; ++q) {
        const __m512bh b0 = as_bh(_mm512_load_si512(b + q * kPr));
        const __m512bh b1 = as_bh(_mm512_load_si512(b + q * kPr + 16));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 3
            for (int part = 0; part < P; ++part) {
                const __m512bh a = as_bh(_mm512_set1_epi32(static_cast<int>(xs[(part * mp + i) * ldxa + q])));
                acc0[i] = _mm512_dpbf16_ps(acc0[i], a, b0);
                acc1[i] = _mm512_dpbf16_ps(acc1[i], a, b1);
            }
        }
    }
    const __mmask16 m0 = tail_mask16(ncols), m1 = tail_mask16(ncols - 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
        float* ci = c + i * ldc;
        __m512 v0 = acc0[i], v1 = acc1[i];
        if (accumulate) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + 16));
        }
        _mm512_mask_storeu_ps(ci, m0, v0);
        _mm512_mask_storeu_ps(ci + 16, m1, v1);
    }
}

template <int P>
void micro_dispatch(int mr, const uint32_t* xs, int64_t mp, int64_t ldxa, const uint32_t* b, int64_t pairs, float* c,
                    int64_t ldc, int64_t ncols, bool acc) {
    switch (mr) {
        case 1:
            micro_kernel<1, P>(xs, mp, ldxa, b, pairs, c, ldc, ncols, acc);
            break;
        case 2:
            micro_kernel<2, P>(xs, mp, ldxa, b, pairs, c, ldc, ncols, acc);
            break;
        case 3:
            micro_kernel<3, P>(xs, mp, ldxa, b, pairs, c, ldc, ncols, acc);
            break;
        case 4:
            micro_kernel<4, P>(xs, mp, ldxa, b, pairs, c, ldc, ncols, acc);
            break;
        case 5:
            micro_kernel<5, P>(xs, mp, ldxa, b, pairs, c, ldc, ncols, acc);
            break;
        case 6:
            micro_kernel<6, P>(xs, mp, ldxa, b, pairs, c, ldc, ncols, acc);
            break;
        case 7:
            micro_kernel<7, P>(xs, mp, ldxa, b, pairs, c, ldc, ncols, acc);
            break;
        default:
            micro_kernel<8, P>(xs, mp, ldxa, b, pairs, c, ldc, ncols, acc);
            break;
    }
}

template <int P>
void gemm(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo,
          uint32_t* pack) {
    const int64_t kp = (k + 31) / 32 * 32;
    auto* xb = static_cast<uint16_t*>(thread_scratch(1, P * m * kp * 2));
    split_rows<P>(x, ldx, m, k, kp, xb);
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
                const int mr = static_cast<int>(imin(kMr, m - i0));
                const int64_t xo = i0 * ldxa + p0 / 2;
                for (int64_t q = 0; q < num_panels; ++q) {
                    micro_dispatch<P>(mr, xs + xo, m, ldxa, pack + q * pairs * kPr, pairs,
                                      out + i0 * ldo + j0 + q * kPr, ldo, imin(kPr, nc - q * kPr), p0 > 0);
                }
            }
        }
    }
}

}  // namespace

int64_t matmul_pack_floats_avx512() { return kNc * (kKc / 2) + 16; }

void matmul_tile_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                        int64_t ldo, float* pack, bool round_x) {
    if (m <= 0 || n <= 0) return;
    if (m <= kGemvMaxRows) {
        gemv(x, ldx, m, k, w, n, out, ldo);
    } else if (!round_x) {
        // f32 accuracy for prefill: the AVX2 f32 GEMM. A bf16 GEMM would need x in 3 bf16 parts
        // for that, 6 vdpbf16ps per 64 MACs: slower than f32 FMA (2 parts, 2^-18 per element,
        // already broke the 1e-5 relative bounds of the DeepSeek model tests).
        matmul_tile_avx2(x, ldx, m, k, w, n, out, ldo, pack);
    } else {
        // The pack buffer is 32-byte aligned at best; the panels want 64 for aligned loads.
        const auto addr = reinterpret_cast<uintptr_t>(pack);
        auto* aligned = reinterpret_cast<uint32_t*>((addr + 63) & ~uintptr_t{63});
        gemm<1>(x, ldx, m, k, w, n, out, ldo, aligned);
    }
}

}  // namespace moeserve::kernels::cpu::detail
