// Single-threaded AVX-512 VNNI int8 tile (built with -mavx512vnni etc.; only called when
// active_isa() >= avx512). vpdpbusd multiplies unsigned by signed bytes, 64 per instruction with
// the four products of each int32 lane summed in. The activations are signed, so they are shifted
// to unsigned, u = x + 128 (an xor of the sign bit), and the shift is taken back out per weight
// row: sum u*w = sum x*w + 128 * sum w. All int32 arithmetic is exact (k < 2^17: |sum| < 2^31),
// so the result is bit-identical to the reference.
//   decode (m <= 2): weight rows streamed one at a time (AMD) or in blocks of 4 with the next
//     block prefetched (elsewhere; isa.h gemv_row_blocks()); 128 * sum w is one more vpdpbusd of
//     the constant 128 by the same weight vector.
//   prefill (m >= 3): weights packed into 32-row panels of 4-byte groups (8 x 32 micro-kernel,
//     no horizontal sums); 128 * sum w summed while packing.
// NOTE: no std or project inline code here (see matmul_tile_isa.h).
#include <immintrin.h>

#include <cstdint>

#include "moeserve/kernels/cpu/matmul_tile_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline __mmask16 tail_mask16(int64_t n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
inline __mmask64 tail_mask64(int64_t n) {
    return n >= 64 ? ~__mmask64{0} : n <= 0 ? __mmask64{0} : (__mmask64{1} << n) - 1;
}

// Decode (m <= 2): NR weight rows at a time against the MR activation rows xu (already shifted
// to unsigned, kp64 bytes each; the padding is never used: masked-off weights are zero), with U
// accumulators per (row of x, weight row) to hide the vpdpbusd latency. kPrefetch: fetch the
// next NR rows' lines while these are read. NR = 1 is one sequential stream (AMD: interleaved
// rows read at about half the rate on Zen4, see the bf16 GEMV in matmul_tile_avx512.cpp);
// NR = 4 with prefetch reads faster on Intel Xeon (isa.h gemv_row_blocks()). n % NR rows are
// left to the caller.
template <int MR, int NR, int U, bool kPrefetch>
void rows_dot(const uint8_t* xu, int64_t kp64, const float* sx, int64_t k, const int8_t* w, const float* sw, int64_t n,
              float* out, int64_t ldo) {
    const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
    const int64_t k64 = k & ~int64_t{63};
    const __mmask64 tail = tail_mask64(k - k64);
    for (int64_t j = 0; j + NR <= n; j += NR) {
        const int8_t* wj = w + j * k;
        __m512i acc[MR][NR][U], corr[NR][U];
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) {
                corr[r][u] = _mm512_setzero_si512();
#pragma GCC unroll 2
                for (int i = 0; i < MR; ++i) acc[i][r][u] = _mm512_setzero_si512();
            }
        }
        // One step of 64 k at p into accumulator u (mask: the k tail).
        auto step = [&](int64_t p, int u, __mmask64 mask) __attribute__((always_inline)) {
#pragma GCC unroll 4
            for (int r = 0; r < NR; ++r) {
                const __m512i wv = _mm512_maskz_loadu_epi8(mask, wj + r * k + p);
                corr[r][u] = _mm512_dpbusd_epi32(corr[r][u], c128, wv);
#pragma GCC unroll 2
                for (int i = 0; i < MR; ++i)
                    acc[i][r][u] = _mm512_dpbusd_epi32(acc[i][r][u], _mm512_load_si512(xu + i * kp64 + p), wv);
            }
        };
        int64_t p = 0;
        for (; p + 64 * U <= k64; p += 64 * U) {
            if constexpr (kPrefetch) {
#pragma GCC unroll 4
                for (int r = 0; r < NR; ++r)
                    _mm_prefetch(reinterpret_cast<const char*>(wj + (NR + r) * k + p), _MM_HINT_T0);
            }
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) step(p + 64 * u, u, ~__mmask64{0});
        }
        for (; p < k; p += 64) step(p, 0, p + 64 <= k ? ~__mmask64{0} : tail);
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) {
            __m512i cs = corr[r][0];
#pragma GCC unroll 4
            for (int u = 1; u < U; ++u) cs = _mm512_add_epi32(cs, corr[r][u]);
#pragma GCC unroll 2
            for (int i = 0; i < MR; ++i) {
                __m512i a = acc[i][r][0];
#pragma GCC unroll 4
                for (int u = 1; u < U; ++u) a = _mm512_add_epi32(a, acc[i][r][u]);
                const int32_t dot = _mm512_reduce_add_epi32(_mm512_sub_epi32(a, cs));
                out[i * ldo + j + r] = static_cast<float>(dot) * (sx[i] * sw[j + r]);
            }
        }
    }
}

// All n weight rows for MR rows of x: row blocks of 4 with prefetch, or one row at a time.
template <int MR>
void gemv_int8(const uint8_t* xu, int64_t kp64, const float* sx, int64_t k, const int8_t* w, const float* sw, int64_t n,
               float* out, int64_t ldo, bool row_blocks) {
    constexpr int kSeqU = MR == 1 ? 4 : 2;  // accumulators per row when reading one row at a time
    const int64_t blocked = row_blocks ? n / 4 * 4 : 0;
    if (blocked > 0) rows_dot<MR, 4, 1, true>(xu, kp64, sx, k, w, sw, blocked, out, ldo);
    if (blocked < n) {
        rows_dot<MR, 1, kSeqU, false>(xu, kp64, sx, k, w + blocked * k, sw + blocked, n - blocked, out + blocked, ldo);
    }
}

// Prefill (m >= 3): weights packed per 32 rows into panels of int32 words, panel[q * 32 + c] =
// the 4 bytes w[c, 4q .. 4q+3] (zero past k and past the rows), so that one vpdpbusd of a
// broadcast 4-byte group of x by one 64-byte panel line gives 16 outputs x 4 k (no horizontal
// sums at the end); an 8 x 32 micro-kernel keeps 16 zmm accumulators. The +128 correction is
// 128 * sum_k w[c, k] per panel column, summed while packing. The whole k is one block (the
// panel, 32 * k bytes, stays in L1/L2 while every row block passes over it), so the int32 dot
// is complete before the one rescale, as in the reference.
constexpr int kPr = 32;
constexpr int kMr = 8;

// dst [ceil(k / 4)][32] words (64-byte aligned); corr[c] = 128 * sum_k w[c, k], by vpdpbusd of
// the constant 128 over the packed lines (zero padding adds nothing).
void pack_panel(const int8_t* w, int64_t k, int64_t rows, int32_t* dst, int32_t* corr) {
    const int64_t k4 = (k + 3) / 4, full = k / 4;
    for (int64_t c = 0; c < kPr; ++c) {
        if (c < rows) {
            const int8_t* wc = w + c * k;
            for (int64_t q = 0; q < full; ++q) {
                int32_t v;
                __builtin_memcpy(&v, wc + 4 * q, 4);
                dst[q * kPr + c] = v;
            }
            if (full < k4) {
                uint32_t v = 0;
                for (int64_t b = 0; b < k - 4 * full; ++b) v |= uint32_t{uint8_t(wc[4 * full + b])} << (8 * b);
                dst[full * kPr + c] = static_cast<int32_t>(v);
            }
        } else {
            for (int64_t q = 0; q < k4; ++q) dst[q * kPr + c] = 0;
        }
    }
    const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int64_t q = 0; q < k4; ++q) {
        s0 = _mm512_dpbusd_epi32(s0, c128, _mm512_load_si512(dst + q * kPr));
        s1 = _mm512_dpbusd_epi32(s1, c128, _mm512_load_si512(dst + q * kPr + 16));
    }
    _mm512_storeu_si512(corr, s0);
    _mm512_storeu_si512(corr + 16, s1);
}

// out[MR, ncols] = float(xu @ panel - corr) * (sx[i] * sw[c]); xu rows of ldu bytes (k4 words used).
template <int MR>
void micro_kernel(const uint8_t* xu, int64_t ldu, const float* sx, const int32_t* panel, int64_t k4,
                  const int32_t* corr, const float* sw, float* out, int64_t ldo, int64_t ncols) {
    __m512i acc0[MR], acc1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_si512();
    for (int64_t q = 0; q < k4; ++q) {
        const __m512i b0 = _mm512_load_si512(panel + q * kPr);
        const __m512i b1 = _mm512_load_si512(panel + q * kPr + 16);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            int32_t word;
            __builtin_memcpy(&word, xu + i * ldu + 4 * q, 4);
            const __m512i a = _mm512_set1_epi32(word);
            acc0[i] = _mm512_dpbusd_epi32(acc0[i], a, b0);
            acc1[i] = _mm512_dpbusd_epi32(acc1[i], a, b1);
        }
    }
    const __mmask16 m0 = tail_mask16(ncols), m1 = tail_mask16(ncols - 16);
    const __m512i c0 = _mm512_loadu_si512(corr), c1 = _mm512_loadu_si512(corr + 16);
    const __m512 s0 = _mm512_maskz_loadu_ps(m0, sw), s1 = _mm512_maskz_loadu_ps(m1, sw + 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
        const __m512 si = _mm512_set1_ps(sx[i]);
        const __m512 v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc0[i], c0)), _mm512_mul_ps(si, s0));
        const __m512 v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc1[i], c1)), _mm512_mul_ps(si, s1));
        _mm512_mask_storeu_ps(out + i * ldo, m0, v0);
        _mm512_mask_storeu_ps(out + i * ldo + 16, m1, v1);
    }
}

void micro_dispatch(int mr, const uint8_t* xu, int64_t ldu, const float* sx, const int32_t* panel, int64_t k4,
                    const int32_t* corr, const float* sw, float* out, int64_t ldo, int64_t ncols) {
    switch (mr) {
        case 1:
            micro_kernel<1>(xu, ldu, sx, panel, k4, corr, sw, out, ldo, ncols);
            break;
        case 2:
            micro_kernel<2>(xu, ldu, sx, panel, k4, corr, sw, out, ldo, ncols);
            break;
        case 3:
            micro_kernel<3>(xu, ldu, sx, panel, k4, corr, sw, out, ldo, ncols);
            break;
        case 4:
            micro_kernel<4>(xu, ldu, sx, panel, k4, corr, sw, out, ldo, ncols);
            break;
        case 5:
            micro_kernel<5>(xu, ldu, sx, panel, k4, corr, sw, out, ldo, ncols);
            break;
        case 6:
            micro_kernel<6>(xu, ldu, sx, panel, k4, corr, sw, out, ldo, ncols);
            break;
        case 7:
            micro_kernel<7>(xu, ldu, sx, panel, k4, corr, sw, out, ldo, ncols);
            break;
        default:
            micro_kernel<8>(xu, ldu, sx, panel, k4, corr, sw, out, ldo, ncols);
            break;
    }
}

void gemm(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w, const float* sw,
          int64_t n, float* out, int64_t ldo) {
    const int64_t k4 = (k + 3) / 4, ldu = (k4 * 4 + 63) / 64 * 64;
    // xu: x + 128 as bytes (the padding past k meets zero weights); then the panel and its sums.
    auto* xu = static_cast<uint8_t*>(thread_scratch(2, m * ldu + 64 * (k4 * kPr * 4 / 64 + 2)));
    auto* panel = reinterpret_cast<int32_t*>(xu + m * ldu);
    alignas(64) int32_t corr[kPr];
    alignas(64) float swp[kPr];
    const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < ldu; p += 64) {
            const __m512i v = _mm512_maskz_loadu_epi8(tail_mask64(k - p), qx + i * ldx + p);
            _mm512_store_si512(xu + i * ldu + p, _mm512_xor_si512(v, c128));
        }
    }
    for (int64_t j0 = 0; j0 < n; j0 += kPr) {
        const int64_t nc = imin(kPr, n - j0);
        pack_panel(w + j0 * k, k, nc, panel, corr);
        for (int64_t c = 0; c < kPr; ++c) swp[c] = c < nc ? sw[j0 + c] : 0.0f;
        for (int64_t i0 = 0; i0 < m; i0 += kMr) {
            micro_dispatch(static_cast<int>(imin(kMr, m - i0)), xu + i0 * ldu, ldu, sx + i0, panel, k4, corr, swp,
                           out + i0 * ldo + j0, ldo, nc);
        }
    }
}

}  // namespace

void matmul_tile_int8_avx512(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                             const float* sw, int64_t n, float* out, int64_t ldo, bool gemv_row_blocks) {
    if (m <= 0 || n <= 0) return;
    if (m <= 2) {
        const int64_t kp64 = (k + 63) / 64 * 64;
        auto* xu = static_cast<uint8_t*>(thread_scratch(2, m * kp64));
        const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t p = 0; p < kp64; p += 64) {
                const __m512i v = _mm512_maskz_loadu_epi8(tail_mask64(k - p), qx + i * ldx + p);
                _mm512_store_si512(xu + i * kp64 + p, _mm512_xor_si512(v, c128));
            }
        }
        if (m == 1) {
            gemv_int8<1>(xu, kp64, sx, k, w, sw, n, out, ldo, gemv_row_blocks);
        } else {
            gemv_int8<2>(xu, kp64, sx, k, w, sw, n, out, ldo, gemv_row_blocks);
        }
        return;
    }
    gemm(qx, ldx, sx, m, k, w, sw, n, out, ldo);
}

}  // namespace moeserve::kernels::cpu::detail
