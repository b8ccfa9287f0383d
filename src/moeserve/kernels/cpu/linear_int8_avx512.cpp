// Single-threaded AVX-512 VNNI int8 tile (built with -mavx512vnni etc.; only
// called when active_isa() >= avx512). vpdpbusd multiplies unsigned by signed
// bytes, 64 per instruction with the four products of each int32 lane summed
// in. The activations are signed, so they are shifted to unsigned, u = x + 128
// (an xor of the sign bit), and the shift is taken back out per weight row: sum
// u*w = sum x*w + 128 * sum w, where 128 * sum w is one more vpdpbusd of the
// constant 128 by the same weight vector (shared by every activation row of the
// block). All int32 arithmetic is exact (k < 2^17: |sum| < 2^31), so the result
// is bit-identical to the reference. One kernel for every m: MR activation rows
// x NR weight rows over the whole k; for m >= 3 the weights go in panels of 16
// rows that stay in L1 while every row block passes over them. NOTE: no std or
// project inline code here (see matmul_tile_isa.h).
#include <immintrin.h>

#include <cstdint>

#include "moeserve/kernels/cpu/matmul_tile_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline __mmask64 tail_mask64(int64_t n) {
    return n >= 64 ? ~__mmask64{0} : n <= 0 ? __mmask64{0} : (__mmask64{1} << n) - 1;
}

template <int MR, int NR>
void block(const int8_t* qx, int64_t ldx, const float* sx, int64_t k, const int8_t* w, const float* sw, float* out,
           int64_t ldo) {
    __m512i acc[MR][NR], corr[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
        corr[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_setzero_si512();
    }
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    auto step = [&](const __m512i* wv, int64_t p, __mmask64 xmask) {
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) corr[j] = _mm512_dpbusd_epi32(corr[j], flip, wv[j]);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512i u = _mm512_xor_si512(_mm512_maskz_loadu_epi8(xmask, qx + i * ldx + p), flip);
#pragma GCC unroll 8
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], u, wv[j]);
        }
    };
    const int64_t k64 = k & ~int64_t{63};
    __m512i wv[NR];
    for (int64_t p = 0; p < k64; p += 64) {
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
            wv[j] = _mm512_loadu_si512(w + j * k + p);
            _mm_prefetch(reinterpret_cast<const char*>(w + (NR + j) * k + p), _MM_HINT_T0);
        }
        step(wv, p, ~__mmask64{0});
    }
    if (k64 < k) {
        // Masked-off weights are 0, so the 128s the xor puts in masked-off
        // activation lanes add nothing.
        const __mmask64 mask = tail_mask64(k - k64);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_epi8(mask, w + j * k + k64);
        step(wv, k64, mask);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
            const int32_t dot = _mm512_reduce_add_epi32(_mm512_sub_epi32(acc[i][j], corr[j]));
            out[i * ldo + j] = static_cast<float>(dot) * (sx[i] * sw[j]);
        }
    }
}

// Decode (m <= 2): the weight rows one at a time, one sequential stream (see the bf16 GEMV in
// matmul_tile_avx512.cpp: interleaved row blocks read at about half the rate). xu: the MR
// activation rows already shifted to unsigned, kp64 bytes each (the padding is never used:
// masked-off weights are zero). U accumulator pairs per row hide the vpdpbusd latency.
template <int MR, int U>
void rows_seq(const uint8_t* xu, int64_t kp64, const float* sx, int64_t k, const int8_t* w, const float* sw, int64_t n,
              float* out, int64_t ldo) {
    const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
    const int64_t k64 = k & ~int64_t{63};
    const __mmask64 tail = tail_mask64(k - k64);
    for (int64_t j = 0; j < n; ++j) {
        const int8_t* wj = w + j * k;
        __m512i acc[MR][U], corr[U];
#pragma GCC unroll 4
        for (int u = 0; u < U; ++u) {
            corr[u] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i) acc[i][u] = _mm512_setzero_si512();
        }
        int64_t p = 0;
        for (; p + 64 * U <= k64; p += 64 * U) {
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) {
                const int64_t q = p + 64 * u;
                const __m512i wv = _mm512_loadu_si512(wj + q);
                corr[u] = _mm512_dpbusd_epi32(corr[u], c128, wv);
#pragma GCC unroll 4
                for (int i = 0; i < MR; ++i)
                    acc[i][u] = _mm512_dpbusd_epi32(acc[i][u], _mm512_load_si512(xu + i * kp64 + q), wv);
            }
        }
        for (; p < k; p += 64) {
            const __m512i wv = _mm512_maskz_loadu_epi8(p + 64 <= k ? ~__mmask64{0} : tail, wj + p);
            corr[0] = _mm512_dpbusd_epi32(corr[0], c128, wv);
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i)
                acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], _mm512_load_si512(xu + i * kp64 + p), wv);
        }
        __m512i cs = corr[0];
#pragma GCC unroll 4
        for (int u = 1; u < U; ++u) cs = _mm512_add_epi32(cs, corr[u]);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
            __m512i a = acc[i][0];
#pragma GCC unroll 4
            for (int u = 1; u < U; ++u) a = _mm512_add_epi32(a, acc[i][u]);
            const int32_t dot = _mm512_reduce_add_epi32(_mm512_sub_epi32(a, cs));
            out[i * ldo + j] = static_cast<float>(dot) * (sx[i] * sw[j]);
        }
    }
}

// MR rows against all n weight rows, NR at a time, the leftovers one by one.
template <int MR, int NR>
void rows(const int8_t* qx, int64_t ldx, const float* sx, int64_t k, const int8_t* w, const float* sw, int64_t n,
          float* out, int64_t ldo) {
    int64_t j = 0;
    for (; j + NR <= n; j += NR) block<MR, NR>(qx, ldx, sx, k, w + j * k, sw + j, out + j, ldo);
    for (; j < n; ++j) block<MR, 1>(qx, ldx, sx, k, w + j * k, sw + j, out + j, ldo);
}

}  // namespace

void matmul_tile_int8_avx512(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                             const float* sw, int64_t n, float* out, int64_t ldo) {
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
            rows_seq<1, 4>(xu, kp64, sx, k, w, sw, n, out, ldo);
        } else {
            rows_seq<2, 2>(xu, kp64, sx, k, w, sw, n, out, ldo);
        }
        return;
    }
    constexpr int64_t kPanel = 16;
    for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
        const int64_t nb = imin(kPanel, n - j0);
        const int8_t* wj = w + j0 * k;
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) rows<4, 4>(qx + i * ldx, ldx, sx + i, k, wj, sw + j0, nb, out + i * ldo + j0, ldo);
        const int64_t rest = m - i;
        const int8_t* qr = qx + i * ldx;
        float* orow = out + i * ldo + j0;
        if (rest == 3) rows<3, 4>(qr, ldx, sx + i, k, wj, sw + j0, nb, orow, ldo);
        if (rest == 2) rows<2, 4>(qr, ldx, sx + i, k, wj, sw + j0, nb, orow, ldo);
        if (rest == 1) rows<1, 4>(qr, ldx, sx + i, k, wj, sw + j0, nb, orow, ldo);
    }
}

}  // namespace moeserve::kernels::cpu::detail
