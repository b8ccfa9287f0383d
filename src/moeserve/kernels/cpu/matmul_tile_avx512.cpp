// Single-threaded AVX-512 BF16 matmul tile for bf16 weights (built with
// -mavx512bf16 etc.; only called when active_isa() >= avx512). GEMV (m <=
// kGemvMaxRows, decode): vdpbf16ps multiplies 32 bf16 weights by 32 bf16
// activations per instruction, so the weights are never widened. The
// activations are split once per call into two bf16 rows, hi = bf16(x) and lo =
// bf16(x - hi) (x = hi + lo to about 2^-17 relative), and each weight vector is
// multiplied by both: the products of a bf16 weight with hi and lo are exact in
// f32, so the result is as accurate as the f32-activation AVX2 path while the
// decode stays memory-bound (two dpbf16 per 64 weight bytes). Many rows
// (prefill) go to the AVX2 GEMM for now. NOTE: no std or project inline code
// here (see matmul_tile_isa.h): helpers live in this anonymous namespace,
// buffers come from thread_scratch().
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

// hi/lo [m, kp] bf16 (kp a multiple of 32, zero past k) from x [m, k] (row
// stride ldx).
void split_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint16_t* hi, uint16_t* lo) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < kp; p += 16) {
            const __m512 v = _mm512_maskz_loadu_ps(tail_mask16(k - p), x + i * ldx + p);
            const __m256bh h = _mm512_cvtneps_pbh(v);
            const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
            const __m256bh l = _mm512_cvtneps_pbh(_mm512_sub_ps(v, hf));
            _mm256_store_si256(reinterpret_cast<__m256i*>(hi + i * kp + p), (__m256i)h);
            _mm256_store_si256(reinterpret_cast<__m256i*>(lo + i * kp + p), (__m256i)l);
        }
    }
}

// out[i, j] = sum_p (hi + lo)[i, p] * w[j, p] for MR rows and NR weight rows,
// the whole k.
template <int MR, int NR>
void gemv_block(const uint16_t* xh, const uint16_t* xl, int64_t kp, int64_t k, const uint16_t* w, float* out,
                int64_t ldo) {
    __m512 acc[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    auto step = [&](const __m512i* wv, int64_t p) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512bh h = as_bh(_mm512_load_si512(xh + i * kp + p));
            const __m512bh l = as_bh(_mm512_load_si512(xl + i * kp + p));
#pragma GCC unroll 8
            for (int j = 0; j < NR; ++j) {
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], h, as_bh(wv[j]));
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], l, as_bh(wv[j]));
            }
        }
    };
    const int64_t k32 = k & ~int64_t{31};
    __m512i wv[NR];
    for (int64_t p = 0; p < k32; p += 32) {
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
            wv[j] = _mm512_loadu_si512(w + j * k + p);
            // The next row block's line at the same offset: keeps DRAM busy while
            // this one computes.
            _mm_prefetch(reinterpret_cast<const char*>(w + (NR + j) * k + p), _MM_HINT_T0);
        }
        step(wv, p);
    }
    if (k32 < k) {
        const __mmask32 mask = tail_mask32(k - k32);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_epi16(mask, w + j * k + k32);
        step(wv, k32);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) out[i * ldo + j] = _mm512_reduce_add_ps(acc[i][j]);
}

// Rows of w one at a time, so the weights are read as one sequential stream (the hardware
// prefetcher follows it at the full read rate; NR interleaved rows of a few KiB each made it
// stop and restart for every row block, at about half the rate). MR rows of x share each weight
// row (hot in L1 for the later rows); U independent accumulators per row hide the vdpbf16ps
// latency. No software prefetch: measured (1 thread, 256 MiB, thread CPU time) it was no faster
// at 4 KiB ahead and slower at 0.5-2 KiB.

template <int MR, int U>
void gemv_seq_rows(const uint16_t* xh, const uint16_t* xl, int64_t kp, int64_t k, const uint16_t* w, int64_t n,
                   float* out, int64_t ldo) {
    const int64_t k32 = k & ~int64_t{31};
    const __mmask32 tail = tail_mask32(k - k32);
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
                const int64_t q = p + 32 * u;
                const __m512bh wv = as_bh(_mm512_loadu_si512(wj + q));
#pragma GCC unroll 8
                for (int i = 0; i < MR; ++i) {
                    acc[i][u] = _mm512_dpbf16_ps(acc[i][u], as_bh(_mm512_load_si512(xh + i * kp + q)), wv);
                    acc[i][u] = _mm512_dpbf16_ps(acc[i][u], as_bh(_mm512_load_si512(xl + i * kp + q)), wv);
                }
            }
        }
        for (; p < k; p += 32) {
            const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(p + 32 <= k ? ~__mmask32{0} : tail, wj + p));
#pragma GCC unroll 8
            for (int i = 0; i < MR; ++i) {
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], as_bh(_mm512_load_si512(xh + i * kp + p)), wv);
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], as_bh(_mm512_load_si512(xl + i * kp + p)), wv);
            }
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

template <int NR>
void gemv_rows(const uint16_t* xh, const uint16_t* xl, int64_t kp, int mr, int64_t k, const uint16_t* w, float* out,
               int64_t ldo) {
    switch (mr) {
        case 1: gemv_block<1, NR>(xh, xl, kp, k, w, out, ldo); break;
        case 2: gemv_block<2, NR>(xh, xl, kp, k, w, out, ldo); break;
        case 3: gemv_block<3, NR>(xh, xl, kp, k, w, out, ldo); break;
        default: gemv_block<4, NR>(xh, xl, kp, k, w, out, ldo); break;
    }
}

template <int NR, int MR_MAX>
void gemv_impl(const uint16_t* xh, const uint16_t* xl, int64_t kp, int64_t m, int64_t k, const uint16_t* w, int64_t n,
               float* out, int64_t ldo) {
    int64_t j = 0;
    for (; j + NR <= n; j += NR) {
        for (int64_t i = 0; i < m; i += MR_MAX) {
            const int mr = static_cast<int>(imin(MR_MAX, m - i));
            gemv_rows<NR>(xh + i * kp, xl + i * kp, kp, mr, k, w + j * k, out + i * ldo + j, ldo);
        }
    }
    for (; j < n; ++j) {
        for (int64_t i = 0; i < m; i += 4) {
            const int mr = static_cast<int>(imin(4, m - i));
            gemv_rows<1>(xh + i * kp, xl + i * kp, kp, mr, k, w + j * k, out + i * ldo + j, ldo);
        }
    }
}

void gemv(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo) {
    const int64_t kp = (k + 31) / 32 * 32;
    auto* xh = static_cast<uint16_t*>(thread_scratch(0, 2 * m * kp * 2));
    uint16_t* xl = xh + m * kp;
    split_rows(x, ldx, m, k, kp, xh, xl);
    for (int64_t i = 0; i < m; i += 4) {
        const uint16_t* h = xh + i * kp;
        const uint16_t* l = xl + i * kp;
        switch (imin(4, m - i)) {
            case 1: gemv_seq_rows<1, 4>(h, l, kp, k, w, n, out + i * ldo, ldo); break;
            case 2: gemv_seq_rows<2, 2>(h, l, kp, k, w, n, out + i * ldo, ldo); break;
            case 3: gemv_seq_rows<3, 2>(h, l, kp, k, w, n, out + i * ldo, ldo); break;
            default: gemv_seq_rows<4, 1>(h, l, kp, k, w, n, out + i * ldo, ldo); break;
        }
    }
}

// ---- GEMM (m > kGemvMaxRows, prefill): bf16 pairs. ----
// By default x is split into hi + lo bf16 as in the GEMV, so prefill logits keep the f32 bound
// the model tests hold (2e-5 of the largest logit vs the float64 reference); that costs two
// vdpbf16ps per product, the f32-FMA rate. MOESERVE_BF16_ACTIVATIONS=round rounds x to bf16 once
// instead (2^-9 relative per element, what llama.cpp does for bf16 weights): twice the rate,
// logits off by ~1e-3 relative. Weights are packed per block into panels of 32 rows x kc as bf16
// pairs: panel[q * 32 + c] = (w[c, 2q], w[c, 2q+1]) as one 32-bit word, so a micro-kernel step
// is two 64-byte loads, one broadcast pair of x (two when split) per row and two (four)
// vdpbf16ps per row, with MR x 32 outputs in 2 * MR zmm accumulators.
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

// c[MR, ncols] (+)= x pairs [MR, pairs] (row stride ldxa words) @ panel [pairs, 32]; with
// kSplit, x = hi + lo pairs (xh, xl) and each panel step is multiplied by both.
template <int MR, bool kSplit>
void micro_kernel(const uint32_t* xh, const uint32_t* xl, int64_t ldxa, const uint32_t* b, int64_t pairs, float* c,
                  int64_t ldc, int64_t ncols, bool accumulate) {
    __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
    for (int64_t q = 0; q < pairs; ++q) {
        const __m512bh b0 = as_bh(_mm512_load_si512(b + q * kPr));
        const __m512bh b1 = as_bh(_mm512_load_si512(b + q * kPr + 16));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512bh a = as_bh(_mm512_set1_epi32(static_cast<int>(xh[i * ldxa + q])));
            acc0[i] = _mm512_dpbf16_ps(acc0[i], a, b0);
            acc1[i] = _mm512_dpbf16_ps(acc1[i], a, b1);
            if constexpr (kSplit) {
                const __m512bh l = as_bh(_mm512_set1_epi32(static_cast<int>(xl[i * ldxa + q])));
                acc0[i] = _mm512_dpbf16_ps(acc0[i], l, b0);
                acc1[i] = _mm512_dpbf16_ps(acc1[i], l, b1);
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

template <bool kSplit>
void micro_dispatch(int mr, const uint32_t* xh, const uint32_t* xl, int64_t ldxa, const uint32_t* b, int64_t pairs,
                    float* c, int64_t ldc, int64_t ncols, bool acc) {
    switch (mr) {
        case 1: micro_kernel<1, kSplit>(xh, xl, ldxa, b, pairs, c, ldc, ncols, acc); break;
        case 2: micro_kernel<2, kSplit>(xh, xl, ldxa, b, pairs, c, ldc, ncols, acc); break;
        case 3: micro_kernel<3, kSplit>(xh, xl, ldxa, b, pairs, c, ldc, ncols, acc); break;
        case 4: micro_kernel<4, kSplit>(xh, xl, ldxa, b, pairs, c, ldc, ncols, acc); break;
        case 5: micro_kernel<5, kSplit>(xh, xl, ldxa, b, pairs, c, ldc, ncols, acc); break;
        case 6: micro_kernel<6, kSplit>(xh, xl, ldxa, b, pairs, c, ldc, ncols, acc); break;
        case 7: micro_kernel<7, kSplit>(xh, xl, ldxa, b, pairs, c, ldc, ncols, acc); break;
        default: micro_kernel<8, kSplit>(xh, xl, ldxa, b, pairs, c, ldc, ncols, acc); break;
    }
}

// xb [m, kp] bf16 (kp a multiple of 32, zero past k) from x [m, k]: one rounding per element.
void round_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint16_t* xb) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < kp; p += 16) {
            const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(tail_mask16(k - p), x + i * ldx + p));
            _mm256_store_si256(reinterpret_cast<__m256i*>(xb + i * kp + p), (__m256i)h);
        }
    }
}

template <bool kSplit>
void gemm(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out, int64_t ldo,
          uint32_t* pack) {
    const int64_t kp = (k + 31) / 32 * 32;
    auto* xb = static_cast<uint16_t*>(thread_scratch(1, 2 * m * kp * 2));
    if (kSplit) {
        split_rows(x, ldx, m, k, kp, xb, xb + m * kp);
    } else {
        round_rows(x, ldx, m, k, kp, xb);
    }
    const auto* xh = reinterpret_cast<const uint32_t*>(xb);
    const auto* xl = reinterpret_cast<const uint32_t*>(xb + m * kp);
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
                    micro_dispatch<kSplit>(mr, xh + xo, xl + xo, ldxa, pack + q * pairs * kPr, pairs,
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
    } else {
        // The pack buffer is 32-byte aligned at best; the panels want 64 for aligned loads.
        const auto addr = reinterpret_cast<uintptr_t>(pack);
        auto* aligned = reinterpret_cast<uint32_t*>((addr + 63) & ~uintptr_t{63});
        if (round_x) {
            gemm<false>(x, ldx, m, k, w, n, out, ldo, aligned);
        } else {
            gemm<true>(x, ldx, m, k, w, n, out, ldo, aligned);
        }
    }
}

}  // namespace moeserve::kernels::cpu::detail
