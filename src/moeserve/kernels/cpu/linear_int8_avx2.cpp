// linear_int8 with AVX2 (no VNNI). The int8 x int8 product uses the sign trick: vpmaddubsw takes
// |w| as unsigned bytes (|-128| = 128 is right as u8) and x with w's sign moved onto it
// (vpsignb; x is in [-127, 127] so it never overflows); each int16 pair sum is at most
// 2 * 128 * 127 = 32512, so vpmaddubsw never saturates. vpmaddwd by ones widens to int32.
// Register blocks of MR activation rows x NR weight rows; the n outputs are split across threads.
// Many rows (prefill): both operands widened to int16 once (activations per call, weights per
// panel of 16 rows, reused by every row block) and multiplied by vpmaddwd: 16 MACs per
// instruction and 2 port-0/1 instructions per 32 MACs instead of the sign trick's 3.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"
#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::kernels::cpu {
namespace detail {
namespace {

// Above this many rows the int16 path's widening pays for itself.
constexpr int64_t kInt16MinRows = 8;

inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// One MR x NR block over the whole k; w points at NR consecutive weight rows of length k.
template <int MR, int NR>
void block(const int8_t* qx, int64_t ldx, const float* sx, int64_t k, const int8_t* w, const float* sw, float* out,
           int64_t ldo, bool prefetch_next) {
    __m256i acc[MR][NR];
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) acc[r][c] = _mm256_setzero_si256();
    }
    const __m256i ones = _mm256_set1_epi16(1);
    auto step = [&](const __m256i* wv, int64_t p) {
        __m256i wa[NR];
        for (int c = 0; c < NR; ++c) wa[c] = _mm256_abs_epi8(wv[c]);
        for (int r = 0; r < MR; ++r) {
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + r * ldx + p));
            for (int c = 0; c < NR; ++c) {
                const __m256i prod = _mm256_maddubs_epi16(wa[c], _mm256_sign_epi8(a, wv[c]));
                acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(prod, ones));
            }
        }
    };
    const int64_t k32 = k & ~int64_t{31};
    __m256i wv[NR];
    for (int64_t p = 0; p < k32; p += 32) {
        for (int c = 0; c < NR; ++c) {
            wv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c * k + p));
            if (prefetch_next) _mm_prefetch(reinterpret_cast<const char*>(w + (NR + c) * k + p), _MM_HINT_T0);
        }
        step(wv, p);
    }
    if (k32 < k) {
        alignas(32) int8_t tail[NR][32];
        std::memset(tail, 0, sizeof(tail));
        for (int c = 0; c < NR; ++c) {
            std::memcpy(tail[c], w + c * k + k32, size_t(k - k32));
            wv[c] = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail[c]));
        }
        step(wv, k32);
    }
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            out[r * ldo + c] = static_cast<float>(hsum_epi32(acc[r][c])) * (sx[r] * sw[c]);
        }
    }
}

// All n columns for MR rows, NR at a time, then the leftover columns one by one.
// int16 block: qx16 rows and the w16 panel rows both hold kp (multiple of 16) values.
template <int MR, int NR>
void block16(const int16_t* qx, int64_t ldx, const float* sx, int64_t kp, const int16_t* w, const float* sw, float* out,
             int64_t ldo) {
    __m256i acc[MR][NR];
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) acc[r][c] = _mm256_setzero_si256();
    }
    for (int64_t p = 0; p < kp; p += 16) {
        __m256i wv[NR];
        for (int c = 0; c < NR; ++c) wv[c] = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + c * kp + p));
        for (int r = 0; r < MR; ++r) {
            const __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(qx + r * ldx + p));
            for (int c = 0; c < NR; ++c) acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(a, wv[c]));
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            out[r * ldo + c] = static_cast<float>(hsum_epi32(acc[r][c])) * (sx[r] * sw[c]);
        }
    }
}

// 16-byte-aligned int16 buffer (the caller's allocation, rounded).
struct AlignedI16 {
    std::vector<int16_t> buf;
    int16_t* get(int64_t n) {
        buf.resize(size_t(n) + 16);
        auto addr = reinterpret_cast<uintptr_t>(buf.data());
        return reinterpret_cast<int16_t*>((addr + 31) & ~uintptr_t{31});
    }
};

// dst[j * kp + p] = src[j * lds + p] widened, zero for p >= k; rows j < rows.
void widen_rows(const int8_t* src, int64_t lds, int64_t rows, int64_t k, int64_t kp, int16_t* dst) {
    for (int64_t j = 0; j < rows; ++j) {
        const int8_t* s = src + j * lds;
        int16_t* d = dst + j * kp;
        int64_t p = 0;
        for (; p + 16 <= k; p += 16) {
            const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p));
            _mm256_store_si256(reinterpret_cast<__m256i*>(d + p), _mm256_cvtepi8_epi16(v));
        }
        for (; p < k; ++p) d[p] = s[p];
        for (; p < kp; ++p) d[p] = 0;
    }
}

void gemm16(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w, const float* sw,
            int64_t n, float* out, int64_t ldo) {
    constexpr int64_t kPanel = 16;
    const int64_t kp = (k + 15) / 16 * 16;
    AlignedI16 xa, wa;
    int16_t* x16 = xa.get(m * kp);
    int16_t* w16 = wa.get(kPanel * kp);
    widen_rows(qx, ldx, m, k, kp, x16);
    for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
        const int64_t nb = std::min(kPanel, n - j0);
        widen_rows(w + j0 * k, k, nb, k, kp, w16);
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) {
            int64_t j = 0;
            for (; j + 2 <= nb; j += 2) {
                block16<4, 2>(x16 + i * kp, kp, sx + i, kp, w16 + j * kp, sw + j0 + j, out + i * ldo + j0 + j, ldo);
            }
            if (j < nb)
                block16<4, 1>(x16 + i * kp, kp, sx + i, kp, w16 + j * kp, sw + j0 + j, out + i * ldo + j0 + j, ldo);
        }
        for (; i < m; ++i) {
            int64_t j = 0;
            for (; j + 4 <= nb; j += 4) {
                block16<1, 4>(x16 + i * kp, kp, sx + i, kp, w16 + j * kp, sw + j0 + j, out + i * ldo + j0 + j, ldo);
            }
            for (; j < nb; ++j) {
                block16<1, 1>(x16 + i * kp, kp, sx + i, kp, w16 + j * kp, sw + j0 + j, out + i * ldo + j0 + j, ldo);
            }
        }
    }
}

template <int MR, int NR>
void rows(const int8_t* qx, int64_t ldx, const float* sx, int64_t k, const int8_t* w, const float* sw, int64_t n,
          float* out, int64_t ldo) {
    const bool prefetch = true;  // decode: memory-bound, fetch the next weight rows early
    int64_t j = 0;
    for (; j + NR <= n; j += NR) block<MR, NR>(qx, ldx, sx, k, w + j * k, sw + j, out + j, ldo, prefetch);
    for (; j < n; ++j) block<MR, 1>(qx, ldx, sx, k, w + j * k, sw + j, out + j, ldo, false);
}

}  // namespace

void matmul_tile_int8_avx2_int16(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                                 const float* sw, int64_t n, float* out, int64_t ldo) {
    gemm16(qx, ldx, sx, m, k, w, sw, n, out, ldo);
}

void matmul_tile_int8_avx2(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                           const float* sw, int64_t n, float* out, int64_t ldo) {
    if (m == 1) {
        rows<1, 4>(qx, ldx, sx, k, w, sw, n, out, ldo);
        return;
    }
    if (m == 2) {
        rows<2, 4>(qx, ldx, sx, k, w, sw, n, out, ldo);
        return;
    }
    if (m > kInt16MinRows) {
        gemm16(qx, ldx, sx, m, k, w, sw, n, out, ldo);
        return;
    }
    // A few rows: keep a panel of weight rows hot in L1 while the row blocks pass over it.
    constexpr int64_t kPanel = 16;
    for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
        const int64_t nb = std::min(kPanel, n - j0);
        const int8_t* wj = w + j0 * k;
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) rows<4, 2>(qx + i * ldx, ldx, sx + i, k, wj, sw + j0, nb, out + i * ldo + j0, ldo);
        const int64_t rest = m - i;
        const int8_t* qr = qx + i * ldx;
        float* orow = out + i * ldo + j0;
        if (rest == 3) rows<3, 2>(qr, ldx, sx + i, k, wj, sw + j0, nb, orow, ldo);
        if (rest == 2) rows<2, 2>(qr, ldx, sx + i, k, wj, sw + j0, nb, orow, ldo);
        if (rest == 1) rows<1, 4>(qr, ldx, sx + i, k, wj, sw + j0, nb, orow, ldo);
    }
}

}  // namespace detail

namespace {
constexpr int64_t kMinParallelMacs = 1 << 15;
}  // namespace

void linear_int8(ThreadPool& pool, const float* x, int64_t m, int64_t k, const int8_t* w, const float* w_scale,
                 int64_t n, float* out, Int8Scratch& s) {
    if (m <= 0) return;
    const int64_t ldq = int8_padded_cols(k);
    s.qx.resize(size_t(m * ldq));
    s.sx.resize(size_t(m));
    const bool parallel = pool.num_threads() > 1 && m * n * k >= kMinParallelMacs && n >= 16;
    if (parallel && m >= 16) {
        pool.parallel_for(m, [&](int64_t i0, int64_t i1) {
            quantize_rows_int8(x + i0 * k, k, i1 - i0, k, s.qx.data() + i0 * ldq, ldq, s.sx.data() + i0);
        });
    } else {
        quantize_rows_int8(x, k, m, k, s.qx.data(), ldq, s.sx.data());
    }
    auto slice = [&](int64_t j0, int64_t j1) {
        detail::matmul_tile_int8(s.qx.data(), ldq, s.sx.data(), m, k, w + j0 * k, w_scale + j0, j1 - j0, out + j0, n);
    };
    if (!parallel) {
        slice(0, n);
        return;
    }
    pool.parallel_for(n, slice, 8);
}

}  // namespace moeserve::kernels::cpu
