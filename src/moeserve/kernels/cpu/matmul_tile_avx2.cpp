// Single-threaded AVX2/FMA matmul tiles: a GEMV that streams bf16/f32 weight rows once with
// independent accumulators (decode), and a GEMM that converts/transposes weight panels to f32
// once per block and reuses them across all rows with a 6x16 register-blocked micro-kernel.
#include <algorithm>

#include "moeserve/kernels/cpu/matmul_tile.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu::detail {
namespace {

using simd::load8;
using simd::to_f32;

// ---- GEMV: MR rows of x against NR rows of w, the whole k at once. ----
template <int MR, int NR, typename W>
inline void gemv_block(const float* x, int64_t ldx, int64_t k, const W* w, float* out, int64_t ldo) {
    __m256 acc[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    int64_t p = 0;
    for (; p + 8 <= k; p += 8) {
        if ((p & 31) == 0) {
            // NOTE: the hardware prefetcher alone left DRAM idle while the FMAs ran (m = 4 read
            // at the sum of compute and memory time); fetch the next row block's lines now.
#pragma GCC unroll 8
            for (int j = 0; j < NR; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + (NR + j) * k + p), _MM_HINT_T0);
        }
        __m256 wv[NR];
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) wv[j] = load8(w + j * k + p);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m256 xv = _mm256_loadu_ps(x + i * ldx + p);
#pragma GCC unroll 8
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR; ++i) {
        for (int j = 0; j < NR; ++j) {
            float s = simd::hsum(acc[i][j]);
            for (int64_t q = p; q < k; ++q) s += x[i * ldx + q] * to_f32(w[j * k + q]);
            out[i * ldo + j] = s;
        }
    }
}

// Rows [0, mr) of x (mr <= MR_MAX of the caller) against NR weight rows.
template <int NR, typename W>
inline void gemv_rows(const float* x, int64_t ldx, int mr, int64_t k, const W* w, float* out, int64_t ldo) {
    switch (mr) {
        case 1:
            gemv_block<1, NR>(x, ldx, k, w, out, ldo);
            break;
        case 2:
            gemv_block<2, NR>(x, ldx, k, w, out, ldo);
            break;
        case 3:
            gemv_block<3, NR>(x, ldx, k, w, out, ldo);
            break;
        default:
            gemv_block<4, NR>(x, ldx, k, w, out, ldo);
            break;
    }
}

template <int NR, int MR_MAX, typename W>
void gemv_impl(const float* x, int64_t ldx, int64_t m, int64_t k, const W* w, int64_t n, float* out, int64_t ldo) {
    int64_t j = 0;
    for (; j + NR <= n; j += NR) {
        for (int64_t i = 0; i < m; i += MR_MAX) {
            const int mr = static_cast<int>(std::min<int64_t>(MR_MAX, m - i));
            gemv_rows<NR>(x + i * ldx, ldx, mr, k, w + j * k, out + i * ldo + j, ldo);
        }
    }
    for (; j < n; ++j) {
        for (int64_t i = 0; i < m; i += 4) {
            const int mr = static_cast<int>(std::min<int64_t>(4, m - i));
            gemv_rows<1>(x + i * ldx, ldx, mr, k, w + j * k, out + i * ldo + j, ldo);
        }
    }
}

template <typename W>
void gemv(const float* x, int64_t ldx, int64_t m, int64_t k, const W* w, int64_t n, float* out, int64_t ldo) {
    if (m == 1) {
        gemv_impl<8, 1>(x, ldx, m, k, w, n, out, ldo);
    } else if (m == 2) {
        gemv_impl<4, 2>(x, ldx, m, k, w, n, out, ldo);
    } else {
        // 12 accumulators + 3 weight rows + 1 x row = the 16 ymm registers.
        gemv_impl<3, 4>(x, ldx, m, k, w, n, out, ldo);
    }
}

// ---- GEMM ----
constexpr int64_t kKcMax = 384;  // k block: a 6 x kc tile of x stays in L1 (9 KiB)
constexpr int64_t kNc = 192;     // weight rows per packed block: kc * kNc * 4 B <= 288 KiB in L2
constexpr int kMr = 6;
constexpr int kNr = 16;

inline void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// dst f32 [kc, 16]: dst[p * 16 + c] = w[c * k + p0 + p] for c < rows, 0 for rows <= c < 16.
template <typename W>
void pack_panel(const W* w, int64_t k, int64_t rows, int64_t p0, int64_t kc, float* dst) {
    int64_t p = 0;
    if (rows == kNr) {
        for (; p + 8 <= kc; p += 8) {
            for (int half = 0; half < 2; ++half) {
                __m256 r[8];
                for (int c = 0; c < 8; ++c) r[c] = load8(w + (half * 8 + c) * k + p0 + p);
                transpose8(r);
                for (int q = 0; q < 8; ++q) _mm256_storeu_ps(dst + (p + q) * kNr + half * 8, r[q]);
            }
        }
    }
    for (; p < kc; ++p) {
        for (int64_t c = 0; c < kNr; ++c) {
            dst[p * kNr + c] = c < rows ? to_f32(w[c * k + p0 + p]) : 0.0f;
        }
    }
}

// c[MR, ncols] (+)= a[MR, kc] (row stride lda) @ b[kc, 16] (packed panel).
// NOTE: the accumulators go to a local tile once after the loop; indexing them by a runtime
// column count made GCC keep them in memory inside the loop.
template <int MR>
void micro_kernel(const float* a, int64_t lda, const float* b, int64_t kc, float* c, int64_t ldc, int64_t ncols,
                  bool accumulate) {
    __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
    for (int64_t p = 0; p < kc; ++p) {
        const __m256 b0 = _mm256_loadu_ps(b + p * kNr);
        const __m256 b1 = _mm256_loadu_ps(b + p * kNr + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; ++i) {
            const __m256 av = _mm256_broadcast_ss(a + i * lda + p);
            acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
            acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
        }
    }
    alignas(32) float tile[MR][kNr];
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
        _mm256_store_ps(tile[i], acc0[i]);
        _mm256_store_ps(tile[i] + 8, acc1[i]);
    }
    if (ncols == kNr) {
        for (int i = 0; i < MR; ++i) {
            float* ci = c + i * ldc;
            __m256 v0 = _mm256_load_ps(tile[i]), v1 = _mm256_load_ps(tile[i] + 8);
            if (accumulate) {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ci));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ci + 8));
            }
            _mm256_storeu_ps(ci, v0);
            _mm256_storeu_ps(ci + 8, v1);
        }
        return;
    }
    for (int i = 0; i < MR; ++i) {
        float* ci = c + i * ldc;
        for (int64_t j = 0; j < ncols; ++j) ci[j] = accumulate ? ci[j] + tile[i][j] : tile[i][j];
    }
}

void micro_dispatch(int mr, const float* a, int64_t lda, const float* b, int64_t kc, float* c, int64_t ldc,
                    int64_t ncols, bool accumulate) {
    switch (mr) {
        case 1:
            micro_kernel<1>(a, lda, b, kc, c, ldc, ncols, accumulate);
            break;
        case 2:
            micro_kernel<2>(a, lda, b, kc, c, ldc, ncols, accumulate);
            break;
        case 3:
            micro_kernel<3>(a, lda, b, kc, c, ldc, ncols, accumulate);
            break;
        case 4:
            micro_kernel<4>(a, lda, b, kc, c, ldc, ncols, accumulate);
            break;
        case 5:
            micro_kernel<5>(a, lda, b, kc, c, ldc, ncols, accumulate);
            break;
        default:
            micro_kernel<6>(a, lda, b, kc, c, ldc, ncols, accumulate);
            break;
    }
}

template <typename W>
void gemm(const float* x, int64_t ldx, int64_t m, int64_t k, const W* w, int64_t n, float* out, int64_t ldo,
          float* pack) {
    // Equal k blocks (k = 384 is one block, 1024 is three of 344) rather than a short last one.
    const int64_t num_kb = (k + kKcMax - 1) / kKcMax;
    const int64_t kc_even = ((k + num_kb - 1) / num_kb + 7) / 8 * 8;
    for (int64_t j0 = 0; j0 < n; j0 += kNc) {
        const int64_t nc = std::min(kNc, n - j0);
        const int64_t num_panels = (nc + kNr - 1) / kNr;
        for (int64_t p0 = 0; p0 < k; p0 += kc_even) {
            const int64_t kc = std::min(kc_even, k - p0);
            for (int64_t q = 0; q < num_panels; ++q) {
                pack_panel(w + (j0 + q * kNr) * k, k, std::min<int64_t>(kNr, nc - q * kNr), p0, kc,
                           pack + q * kc * kNr);
            }
            for (int64_t i0 = 0; i0 < m; i0 += kMr) {
                const int mr = static_cast<int>(std::min<int64_t>(kMr, m - i0));
                for (int64_t q = 0; q < num_panels; ++q) {
                    micro_dispatch(mr, x + i0 * ldx + p0, ldx, pack + q * kc * kNr, kc, out + i0 * ldo + j0 + q * kNr,
                                   ldo, std::min<int64_t>(kNr, nc - q * kNr), p0 > 0);
                }
            }
        }
    }
}

template <typename W>
void tile(const float* x, int64_t ldx, int64_t m, int64_t k, const W* w, int64_t n, float* out, int64_t ldo,
          float* pack) {
    if (m <= 0 || n <= 0) return;
    if (m <= kGemvMaxRows) {
        gemv(x, ldx, m, k, w, n, out, ldo);
    } else {
        gemm(x, ldx, m, k, w, n, out, ldo, pack);
    }
}

}  // namespace

int64_t matmul_pack_floats_avx2() { return kKcMax * kNc; }

void matmul_tile_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                      int64_t ldo, float* pack) {
    tile(x, ldx, m, k, w, n, out, ldo, pack);
}

void matmul_tile_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* out,
                      int64_t ldo, float* pack) {
    tile(x, ldx, m, k, w, n, out, ldo, pack);
}

}  // namespace moeserve::kernels::cpu::detail
