// The AVX2 W4A16 tile. 16 codes (8 bytes) at a time are split into nibbles, interleaved back into
// column order, widened to f32 and turned into scale * (code - zero): the same one rounding as
// dequantize_int4_row, so only the order of the f32 sums differs from the reference. Few rows
// (decode): each weight row is widened once in registers and multiplied into up to 4 activation
// rows. Many rows (prefill): a panel of weight rows is widened into a per-thread f32 buffer and
// handed to the f32 GEMM tile, so the widening is paid once per panel, not once per row.
#include <immintrin.h>

#include <algorithm>

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

// Columns [p, p + 16) of a row whose codes start at `row`: lo = columns p..p+7, hi = p+8..p+15.
inline void widen16(const uint8_t* row, int64_t p, __m256 zero, __m256 scale, __m256& lo, __m256& hi) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + p / 2));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(bytes, mask);
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    const __m128i codes = _mm_unpacklo_epi8(low, high);  // column order: low nibble first
    lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes));
    hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(codes, 8)));
    lo = _mm256_mul_ps(_mm256_sub_ps(lo, zero), scale);
    hi = _mm256_mul_ps(_mm256_sub_ps(hi, zero), scale);
}

inline float scalar_weight(const uint8_t* row, int64_t p, float zero, float scale) {
    const int code = (row[p / 2] >> (4 * (p & 1))) & 0x0F;
    return (static_cast<float>(code) - zero) * scale;
}

// MR activation rows against every weight row of w.
template <int MR>
void gemv_rows(const float* x, int64_t ldx, const Int4Weights& w, float* out, int64_t ldo) {
    const int64_t k = w.k, gs = w.group_size, ng = w.groups();
    for (int64_t j = 0; j < w.n; ++j) {
        const uint8_t* row = w.codes + j * (k / 2);
        const float* sc = w.scale + j * ng;
        const float* zr = w.zero + j * ng;
        __m256 acc[MR];
        float tail[MR];
        for (int r = 0; r < MR; ++r) {
            acc[r] = _mm256_setzero_ps();
            tail[r] = 0.0f;
        }
        for (int64_t g = 0; g < ng; ++g) {
            const int64_t p1 = std::min(k, (g + 1) * gs);
            const __m256 vz = _mm256_set1_ps(zr[g]), vs = _mm256_set1_ps(sc[g]);
            int64_t p = g * gs;
            for (; p + 16 <= p1; p += 16) {
                __m256 lo, hi;
                widen16(row, p, vz, vs, lo, hi);
                for (int r = 0; r < MR; ++r) {
                    acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + p), lo, acc[r]);
                    acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + p + 8), hi, acc[r]);
                }
            }
            for (; p < p1; ++p) {
                const float wv = scalar_weight(row, p, zr[g], sc[g]);
                for (int r = 0; r < MR; ++r) tail[r] += x[r * ldx + p] * wv;
            }
        }
        for (int r = 0; r < MR; ++r) out[r * ldo + j] = hsum(acc[r]) + tail[r];
    }
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
        for (; i + 4 <= m; i += 4) gemv_rows<4>(x + i * ldx, ldx, w, out + i * ldo, ldo);
        const int64_t rest = m - i;
        if (rest == 3) gemv_rows<3>(x + i * ldx, ldx, w, out + i * ldo, ldo);
        if (rest == 2) gemv_rows<2>(x + i * ldx, ldx, w, out + i * ldo, ldo);
        if (rest == 1) gemv_rows<1>(x + i * ldx, ldx, w, out + i * ldo, ldo);
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
