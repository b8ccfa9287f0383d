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
    if (m == 1) {
        gemv_impl<8, 1>(xh, xl, kp, m, k, w, n, out, ldo);
    } else if (m == 2) {
        gemv_impl<8, 2>(xh, xl, kp, m, k, w, n, out, ldo);
    } else {
        gemv_impl<4, 4>(xh, xl, kp, m, k, w, n, out, ldo);
    }
}

}  // namespace

int64_t matmul_pack_floats_avx512() { return 0; }

void matmul_tile_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                        int64_t ldo, float* pack) {
    if (m <= 0 || n <= 0) return;
    if (m <= kGemvMaxRows) {
        gemv(x, ldx, m, k, w, n, out, ldo);
    } else {
        matmul_tile_avx2(x, ldx, m, k, w, n, out, ldo, pack);
    }
}

}  // namespace moeserve::kernels::cpu::detail
