// The AVX-512 W4A16 tile for few activation rows (decode). 32 codes (16 bytes) widen at a time:
// each byte zero-extended to a 32-bit lane, its low nibble is the even column and its high nibble
// the odd one, so the codes come out as two registers, the 16 even columns and the 16 odd ones,
// with no shuffle per weight row; the activation rows are reordered once per call to match
// (split_even_odd: per 32 columns, the even ones then the odd ones). A code becomes its weight
// through a 16-entry table per (row, group) in one register, scale * (code - zero) computed once
// per code value (vpermps), which is the one rounding of dequantize_int4_row: only the order of
// the f32 sums differs from the reference (as the AVX2 tile). Widening and scaling each code was
// 0.8x of this speed. Many rows (prefill) go to the avx512 f32 GEMM, which widens 32 weight rows
// at a time into its packed panels (gemm_int4_avx512, matmul_tile_avx512.cpp): 512-bit FMAs where
// the AVX2 tile's panels ran the AVX2 GEMM. Shapes whose groups are not whole multiples of 32
// columns (16 for the GEMM) run the AVX2 tile.
// AVX-512 F/BW/VL/DQ code.
#include <immintrin.h>

#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

// Rows above this take a GEMM: the avx512 f32 GEMM (gemm_int4_avx512), or the AVX2 tile's panels.
constexpr int64_t kGemvRows = 4;
// thread_scratch slot of the reordered activation rows or the GEMM's panels (the int4 tiles' slot;
// the AVX2 tile's panel is never live at the same time: one call takes one path).
constexpr int kReorderedSlot = 3;
constexpr int64_t kChunk = 32;  // columns widened at a time

// x's k columns (k a multiple of 32), per 32: the 16 even columns, then the 16 odd ones.
void split_even_odd(const float* x, int64_t k, float* dst) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t p = 0; p < k; p += kChunk) {
        const __m512 a = _mm512_loadu_ps(x + p);
        const __m512 b = _mm512_loadu_ps(x + p + 16);
        _mm512_storeu_ps(dst + p, _mm512_permutex2var_ps(a, even, b));
        _mm512_storeu_ps(dst + p + 16, _mm512_permutex2var_ps(a, odd, b));
    }
}

// MR reordered activation rows (row r at xs + r * k) against NR weight rows starting at row j.
// The even and odd columns go to separate accumulators: two FMA chains per (row, weight row).
template <int MR, int NR>
void gemv_block(const float* xs, const Int4Weights& w, int64_t j, float* out, int64_t ldo) {
    const int64_t k = w.k, gs = w.group_size, ng = w.groups();
    const __m512 codes16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 even_acc[MR][NR], odd_acc[MR][NR];
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            even_acc[r][c] = _mm512_setzero_ps();
            odd_acc[r][c] = _mm512_setzero_ps();
        }
    }
    for (int64_t g = 0; g < ng; ++g) {
        // the group's 16 weight values, scale * (code - zero), one lane per code
        __m512 table[NR];
        for (int c = 0; c < NR; ++c) {
            table[c] = _mm512_mul_ps(_mm512_sub_ps(codes16, _mm512_set1_ps(w.zero[(j + c) * ng + g])),
                                     _mm512_set1_ps(w.scale[(j + c) * ng + g]));
        }
        const int64_t p1 = (g + 1) * gs < k ? (g + 1) * gs : k;
        for (int64_t p = g * gs; p < p1; p += kChunk) {
            __m512 we[NR], wo[NR];
            for (int c = 0; c < NR; ++c) {
                const uint8_t* codes = w.codes + (j + c) * (k / 2) + p / 2;
                const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
                // vpermps reads the low 4 bits of each index: the low nibble as it is
                we[c] = _mm512_permutexvar_ps(bytes, table[c]);
                wo[c] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table[c]);
            }
            for (int r = 0; r < MR; ++r) {
                const __m512 xe = _mm512_loadu_ps(xs + r * k + p);
                const __m512 xo = _mm512_loadu_ps(xs + r * k + p + 16);
                for (int c = 0; c < NR; ++c) {
                    even_acc[r][c] = _mm512_fmadd_ps(xe, we[c], even_acc[r][c]);
                    odd_acc[r][c] = _mm512_fmadd_ps(xo, wo[c], odd_acc[r][c]);
                }
            }
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            out[r * ldo + j + c] = _mm512_reduce_add_ps(_mm512_add_ps(even_acc[r][c], odd_acc[r][c]));
        }
    }
}

// MR reordered activation rows against every weight row of w, NR weight rows at a time.
template <int MR, int NR>
void gemv_rows(const float* xs, const Int4Weights& w, float* out, int64_t ldo) {
    int64_t j = 0;
    for (; j + NR <= w.n; j += NR) gemv_block<MR, NR>(xs, w, j, out, ldo);
    for (; j < w.n; ++j) gemv_block<MR, 1>(xs, w, j, out, ldo);
}

}  // namespace

void matmul_tile_int4_avx512(const float* x, int64_t ldx, int64_t m, const Int4Weights& w, float* out, int64_t ldo) {
    if (m > kGemvRows && w.k % 16 == 0 && w.group_size % 16 == 0) {
        auto* pack = static_cast<float*>(thread_scratch(kReorderedSlot, matmul_pack_floats_avx512() * 4));
        gemm_int4_avx512(x, ldx, m, w.k, w.codes, w.scale, w.zero, w.group_size, w.n, out, ldo, pack);
        return;
    }
    if (m > kGemvRows || w.k % kChunk != 0 || w.group_size % kChunk != 0) {
        matmul_tile_int4_avx2(x, ldx, m, w, out, ldo);
        return;
    }
    auto* xs = static_cast<float*>(thread_scratch(kReorderedSlot, m * w.k * 4));
    for (int64_t i = 0; i < m; ++i) split_even_odd(x + i * ldx, w.k, xs + i * w.k);
    switch (m) {
        case 1:
            gemv_rows<1, 4>(xs, w, out, ldo);
            break;
        case 2:
            gemv_rows<2, 2>(xs, w, out, ldo);
            break;
        case 3:
            gemv_rows<3, 2>(xs, w, out, ldo);
            break;
        default:
            gemv_rows<4, 2>(xs, w, out, ldo);
            break;
    }
}

}  // namespace moeserve::kernels::cpu::detail
