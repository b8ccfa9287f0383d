// The AVX2 W4A16 tile. 8 codes (one 32-bit word) at a time are shifted into their lanes, widened
// to f32 and turned into scale * (code - zero): the same one rounding as
// dequantize_int4_row, so only the order of the f32 sums differs from the reference. Few rows
// (decode): blocks of weight rows are widened in registers and multiplied into up to 4
// activation rows (one decode row: 4 weight rows at a time, 8 independent FMA chains). Many rows
// (prefill): a panel of weight rows is widened into a per-thread f32 buffer and
// handed to the f32 GEMM tile, so the widening is paid once per panel, not once per row.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/matmul_tile.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

// Rows above this take the panel + f32 GEMM path.
constexpr int64_t kGemvRows = 4;
// Weight rows widened per panel.
constexpr int64_t kPanelRows = 16;
// thread_scratch slot of the panel (0-2 are the avx512 tiles').
constexpr int kPanelSlot = 3;

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Columns [p, p + 8) of a row whose codes start at `row` (p even): the 32-bit word holding
// them broadcast to every lane (a load-port broadcast, no shuffle), lane c shifted right by 4c
// and masked (column p + c sits in bits 4c..4c+3 of the little-endian word), then widened.
inline __m256 widen8(const uint8_t* row, int64_t p, __m256 zero, __m256 scale) {
    uint32_t word;
    std::memcpy(&word, row + p / 2, 4);
    const __m256i shifted =
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256i codes = _mm256_and_si256(shifted, _mm256_set1_epi32(0x0F));
    return _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(codes), zero), scale);
}

// Columns [p, p + 16): lo = columns p..p+7, hi = p+8..p+15.
inline void widen16(const uint8_t* row, int64_t p, __m256 zero, __m256 scale, __m256& lo, __m256& hi) {
    lo = widen8(row, p, zero, scale);
    hi = widen8(row, p + 8, zero, scale);
}

inline float scalar_weight(const uint8_t* row, int64_t p, float zero, float scale) {
    const int code = (row[p / 2] >> (4 * (p & 1))) & 0x0F;
    return (static_cast<float>(code) - zero) * scale;
}

// MR activation rows against NR weight rows starting at row j. The low and high 8 columns of
// each 16 go to separate accumulators: two FMA chains per (row, weight row), so a single decode
// row is not bound by the FMA latency.
template <int MR, int NR>
void gemv_block(const float* x, int64_t ldx, const Int4Weights& w, int64_t j, float* out, int64_t ldo) {
    const int64_t k = w.k, gs = w.group_size, ng = w.groups();
    __m256 lo_acc[MR][NR], hi_acc[MR][NR];
    float tail[MR][NR];
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            lo_acc[r][c] = _mm256_setzero_ps();
            hi_acc[r][c] = _mm256_setzero_ps();
            tail[r][c] = 0.0f;
        }
    }
    for (int64_t g = 0; g < ng; ++g) {
        const int64_t p1 = std::min(k, (g + 1) * gs);
        __m256 vz[NR], vs[NR];
        for (int c = 0; c < NR; ++c) {
            vz[c] = _mm256_set1_ps(w.zero[(j + c) * ng + g]);
            vs[c] = _mm256_set1_ps(w.scale[(j + c) * ng + g]);
        }
        int64_t p = g * gs;
        for (; p + 16 <= p1; p += 16) {
            __m256 lo[NR], hi[NR];
            for (int c = 0; c < NR; ++c) widen16(w.codes + (j + c) * (k / 2), p, vz[c], vs[c], lo[c], hi[c]);
            for (int r = 0; r < MR; ++r) {
                const __m256 xl = _mm256_loadu_ps(x + r * ldx + p), xh = _mm256_loadu_ps(x + r * ldx + p + 8);
                for (int c = 0; c < NR; ++c) {
                    lo_acc[r][c] = _mm256_fmadd_ps(xl, lo[c], lo_acc[r][c]);
                    hi_acc[r][c] = _mm256_fmadd_ps(xh, hi[c], hi_acc[r][c]);
                }
            }
        }
        for (; p < p1; ++p) {
            for (int c = 0; c < NR; ++c) {
                const float wv =
                    scalar_weight(w.codes + (j + c) * (k / 2), p, w.zero[(j + c) * ng + g], w.scale[(j + c) * ng + g]);
                for (int r = 0; r < MR; ++r) tail[r][c] += x[r * ldx + p] * wv;
            }
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            out[r * ldo + j + c] = hsum(_mm256_add_ps(lo_acc[r][c], hi_acc[r][c])) + tail[r][c];
        }
    }
}

// MR activation rows against every weight row of w, NR weight rows at a time.
template <int MR, int NR>
void gemv_rows(const float* x, int64_t ldx, const Int4Weights& w, float* out, int64_t ldo) {
    int64_t j = 0;
    for (; j + NR <= w.n; j += NR) gemv_block<MR, NR>(x, ldx, w, j, out, ldo);
    for (; j < w.n; ++j) gemv_block<MR, 1>(x, ldx, w, j, out, ldo);
}

// Row j of w widened into dst [k].
void widen_row(const Int4Weights& w, int64_t j, float* dst) {
    const int64_t k = w.k, gs = w.group_size, ng = w.groups();
    const uint8_t* row = w.codes + j * (k / 2);
    for (int64_t g = 0; g < ng; ++g) {
        const float z = w.zero[j * ng + g], s = w.scale[j * ng + g];
        const __m256 vz = _mm256_set1_ps(z), vs = _mm256_set1_ps(s);
        const int64_t p1 = std::min(k, (g + 1) * gs);
        int64_t p = g * gs;
        for (; p + 16 <= p1; p += 16) {
            __m256 lo, hi;
            widen16(row, p, vz, vs, lo, hi);
            _mm256_storeu_ps(dst + p, lo);
            _mm256_storeu_ps(dst + p + 8, hi);
        }
        for (; p < p1; ++p) dst[p] = scalar_weight(row, p, z, s);
    }
}

}  // namespace

void matmul_tile_int4_avx2(const float* x, int64_t ldx, int64_t m, const Int4Weights& w, float* out, int64_t ldo) {
    if (m <= kGemvRows) {
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) gemv_rows<4, 1>(x + i * ldx, ldx, w, out + i * ldo, ldo);
        const int64_t rest = m - i;
        if (rest == 3) gemv_rows<3, 1>(x + i * ldx, ldx, w, out + i * ldo, ldo);
        if (rest == 2) gemv_rows<2, 2>(x + i * ldx, ldx, w, out + i * ldo, ldo);
        if (rest == 1) gemv_rows<1, 4>(x + i * ldx, ldx, w, out + i * ldo, ldo);
        return;
    }
    const int64_t panel_floats = kPanelRows * w.k;
    auto* buf = static_cast<float*>(thread_scratch(kPanelSlot, (panel_floats + matmul_pack_floats()) * 4));
    float* panel = buf;
    float* pack = buf + panel_floats;
    for (int64_t j0 = 0; j0 < w.n; j0 += kPanelRows) {
        const int64_t nb = std::min(kPanelRows, w.n - j0);
        for (int64_t j = 0; j < nb; ++j) widen_row(w, j0 + j, panel + j * w.k);
        matmul_tile(x, ldx, m, w.k, panel, nb, out + j0, ldo, pack);
    }
}

}  // namespace moeserve::kernels::cpu::detail
