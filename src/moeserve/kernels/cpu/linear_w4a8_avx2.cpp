// The AVX2 W4A8 tile: the AVX-512 tile's scheme (linear_w4a8_avx512.cpp) in 32-byte halves of a
// chunk. vpmaddubsw multiplies the unsigned codes by the signed activations and adds neighbours
// (at most 2 * 15 * 127 in magnitude, so neither it nor the even + odd sum saturates); vpmaddwd
// by ones widens the pairs to dword lanes of 8 columns each.
#include <immintrin.h>

#include <cstring>

#include "moeserve/kernels/cpu/linear_w4a8.h"

namespace moeserve::kernels::cpu::detail {
namespace {

constexpr int64_t kHalfBytes = kW4a8Chunk / 4;  // code bytes of half a chunk

// The 8 lanes' scales of a weight row (its scales at `row`) for a half chunk whose first group is
// g0 (lane l holds the half's columns 8l .. 8l + 7). Groups of 32 put lanes 4..7 in the next one;
// larger groups (multiples of 64 columns, or one per row) span whole halves.
inline __m256 half_scales(const float* row, int64_t g0, int64_t ng, bool narrow) {
    if (!narrow) return _mm256_set1_ps(row[g0]);
    const float next = g0 + 1 < ng ? row[g0 + 1] : 0.0f;
    return _mm256_setr_m128(_mm_set1_ps(row[g0]), _mm_set1_ps(next));
}

inline float zero_products(const Int4Weights& w, int64_t j, const float* qsum, int64_t ng) {
    float acc = 0.0f;
    for (int64_t g = 0; g < ng; ++g) acc += w.scale[j * ng + g] * w.zero[j * ng + g] * qsum[g];
    return acc;
}

inline float reduce_add(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// MR activation rows against weight rows j..j+NR-1.
template <int MR, int NR>
void tile_block(const W4a8Rows& a, const Int4Weights& w, int64_t j, float* out, int64_t ldo) {
    const int64_t k = w.k, ng = w.groups();
    // the half's group, counted (a division per half and row cost more than its products)
    const bool narrow = ng > 1 && w.group_size == 32;
    const int64_t halves_per_group = ng == 1 ? int64_t{1} << 40 : w.group_size / (2 * kHalfBytes);
    int64_t group = 0, halves_left = halves_per_group;
    const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[MR][NR];
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) acc[r][c] = _mm256_setzero_ps();
    }
    for (int64_t h0 = 0; h0 < k; h0 += 2 * kHalfBytes) {  // h0: first column of the half
        const int64_t c0 = h0 / kW4a8Chunk * kW4a8Chunk, half = (h0 - c0) / (2 * kHalfBytes);
        const int64_t g0 = narrow ? h0 / 32 : group;
        if (!narrow && --halves_left == 0) {
            ++group;
            halves_left = halves_per_group;
        }
        const int64_t bytes = (k - h0) / 2 < kHalfBytes ? (k - h0) / 2 : kHalfBytes;
        __m256i lo[NR], hi[NR];
        __m256 sc[NR];
        for (int c = 0; c < NR; ++c) {
            const uint8_t* src = w.codes + (j + c) * (k / 2) + h0 / 2;
            __m256i codes;
            if (bytes == kHalfBytes) {
                codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
            } else {  // the row's last 16 code bytes: no read past the matrix
                alignas(32) uint8_t tail[kHalfBytes] = {};
                std::memcpy(tail, src, size_t(bytes));
                codes = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
            }
            lo[c] = _mm256_and_si256(codes, nibble);
            hi[c] = _mm256_and_si256(_mm256_srli_epi16(codes, 4), nibble);
            sc[c] = half_scales(w.scale + (j + c) * ng, g0, ng, narrow);
        }
        for (int r = 0; r < MR; ++r) {
            const int8_t* q = a.q + r * a.ldq + c0 + half * kHalfBytes;
            const __m256i even = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
            const __m256i odd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + kW4a8Chunk / 2));
            for (int c = 0; c < NR; ++c) {
                const __m256i pairs =
                    _mm256_add_epi16(_mm256_maddubs_epi16(lo[c], even), _mm256_maddubs_epi16(hi[c], odd));
                const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                acc[r][c] = _mm256_fmadd_ps(dot, sc[c], acc[r][c]);
            }
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int c = 0; c < NR; ++c) {
            const float zeros = zero_products(w, j + c, a.qsum + r * a.ldg, ng);
            out[r * ldo + j + c] = a.sx[r] * (reduce_add(acc[r][c]) - zeros);
        }
    }
}

template <int MR, int NR>
void tile_rows(const W4a8Rows& a, const Int4Weights& w, float* out, int64_t ldo) {
    int64_t j = 0;
    for (; j + NR <= w.n; j += NR) tile_block<MR, NR>(a, w, j, out, ldo);
    for (; j < w.n; ++j) tile_block<MR, 1>(a, w, j, out, ldo);
}

}  // namespace

void matmul_tile_w4a8_avx2(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo) {
    if (!w4a8_vector_shape(w)) {
        matmul_tile_w4a8_ref(a, m, w, out, ldo);
        return;
    }
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) tile_rows<4, 2>(a.from(i), w, out + i * ldo, ldo);
    switch (m - i) {
        case 1:
            tile_rows<1, 3>(a.from(i), w, out + i * ldo, ldo);
            break;
        case 2:
            tile_rows<2, 2>(a.from(i), w, out + i * ldo, ldo);
            break;
        case 3:
            tile_rows<3, 2>(a.from(i), w, out + i * ldo, ldo);
            break;
        default:
            break;
    }
}

}  // namespace moeserve::kernels::cpu::detail
