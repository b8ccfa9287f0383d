// AVX-512 dot products of FP8 weight rows (GgmlType::kF8E4M3x128: per 128 columns an f32 block
// scale and 128 E4M3 bytes) with f32 activation rows: W8A16, the weights widened in registers.
//
// E4M3 to f32 without a table: an E4M3 byte b = s eeee mmm, moved into an f16 as s 0eeee mmm
// 0000000, is the same number times 2^-8, denormals included (both formats' denormals are
// 0.mmm times their smallest normal exponent, which differ by 8). vcvtph2ps widens it exactly;
// multiplying by d * 256 gives d * e4m3(b) rounded once, the reference's dequantized weight.
// Each (weight row, activation row) pair accumulates in its own 16 f32 lanes in the same order
// whatever the tile, so a tile's results have the pair kernel's bits.
#include <immintrin.h>

#include <cstring>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

// Local copies, not gguf_blocks.h's inline helpers: this file's AVX-512 code generation must not
// become the one definition other files call (see matmul_tile_isa.h).
float block_scale(const uint8_t* block) {
    float d;
    std::memcpy(&d, block, 4);
    return d;
}

// 32 E4M3 bytes -> 2 x 16 f32, each times 2^-8.
inline void widen32(const uint8_t* q, __m512& lo, __m512& hi) {
    __m512i h = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    h = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(h, 8), 1), _mm512_set1_epi16(static_cast<short>(0xBFFF)));
    lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

float sum16(__m512 v) {
    const __m256 s8 =
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// As gguf_dot_avx512.cpp's tiles: decode walks the rows in order, so each block also fetches the
// same bytes of the rows kPrefetchRows further on.
constexpr int kPrefetchRows = 8;

template <int R, int C>
void tile_f8(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    static_assert(R >= 1 && R <= 4 && C >= 1 && C <= 4);
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
    const float* act[C];
    for (int c = 0; c < C; ++c) act[c] = reinterpret_cast<const float*>(a[c]);
    for (int64_t b = 0; b < nb; ++b) {
        const size_t at = static_cast<size_t>(b) * sizeof(BlockF8x128);
        __m512 d[R];
        for (int r = 0; r < R; ++r) {
            const uint8_t* block = w + r * w_stride + at;
            d[r] = _mm512_set1_ps(block_scale(block) * 256.0f);
            const uint8_t* ahead = block + kPrefetchRows * w_stride;
            _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(ahead + 64), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(ahead + 128), _MM_HINT_T0);
        }
        for (int k = 0; k < kQF8; k += 32) {
            __m512 x_lo[C], x_hi[C];
            for (int c = 0; c < C; ++c) {
                x_lo[c] = _mm512_loadu_ps(act[c] + b * kQF8 + k);
                x_hi[c] = _mm512_loadu_ps(act[c] + b * kQF8 + k + 16);
            }
            for (int r = 0; r < R; ++r) {
                __m512 lo, hi;
                widen32(w + r * w_stride + at + 4 + k, lo, hi);
                lo = _mm512_mul_ps(lo, d[r]);
                hi = _mm512_mul_ps(hi, d[r]);
                for (int c = 0; c < C; ++c) {
                    acc[r][c] = _mm512_fmadd_ps(lo, x_lo[c], acc[r][c]);
                    acc[r][c] = _mm512_fmadd_ps(hi, x_hi[c], acc[r][c]);
                }
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) out[c * ldo + r] = sum16(acc[r][c]);
    }
}

// The same products on rows widened beforehand (f8_widen_avx512): the tile above without its
// conversions, in the same order, so with the same bits.
template <int R, int C>
void tile_f32(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    static_assert(R >= 1 && R <= 4 && C >= 1 && C <= 4);
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
    const float* act[C];
    for (int c = 0; c < C; ++c) act[c] = reinterpret_cast<const float*>(a[c]);
    const float* wf[R];
    for (int r = 0; r < R; ++r) wf[r] = reinterpret_cast<const float*>(w + r * w_stride);
    for (int64_t i = 0; i < nb * kQF8; i += 32) {
        __m512 x_lo[C], x_hi[C];
        for (int c = 0; c < C; ++c) {
            x_lo[c] = _mm512_loadu_ps(act[c] + i);
            x_hi[c] = _mm512_loadu_ps(act[c] + i + 16);
        }
        for (int r = 0; r < R; ++r) {
            const __m512 lo = _mm512_loadu_ps(wf[r] + i);
            const __m512 hi = _mm512_loadu_ps(wf[r] + i + 16);
            for (int c = 0; c < C; ++c) {
                acc[r][c] = _mm512_fmadd_ps(lo, x_lo[c], acc[r][c]);
                acc[r][c] = _mm512_fmadd_ps(hi, x_hi[c], acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) out[c * ldo + r] = sum16(acc[r][c]);
    }
}

}  // namespace

void f8_widen_avx512(int64_t nb, int rows, const uint8_t* w, size_t w_stride, float* dst) {
    for (int r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* block = w + r * w_stride + static_cast<size_t>(b) * sizeof(BlockF8x128);
            const __m512 d = _mm512_set1_ps(block_scale(block) * 256.0f);
            float* out = dst + (r * nb + b) * kQF8;
            for (int k = 0; k < kQF8; k += 32) {
                __m512 lo, hi;
                widen32(block + 4 + k, lo, hi);
                _mm512_storeu_ps(out + k, _mm512_mul_ps(lo, d));
                _mm512_storeu_ps(out + k + 16, _mm512_mul_ps(hi, d));
            }
        }
    }
}

GgufTileFn f32_tile_avx512(int rows, int cols) {
    static constexpr GgufTileFn kTable[4][4] = {
        {tile_f32<1, 1>, tile_f32<1, 2>, tile_f32<1, 3>, tile_f32<1, 4>},
        {tile_f32<2, 1>, tile_f32<2, 2>, tile_f32<2, 3>, tile_f32<2, 4>},
        {tile_f32<3, 1>, tile_f32<3, 2>, tile_f32<3, 3>, tile_f32<3, 4>},
        {tile_f32<4, 1>, tile_f32<4, 2>, tile_f32<4, 3>, tile_f32<4, 4>},
    };
    return kTable[rows - 1][cols - 1];
}

GgufTileFn f8_tile_avx512(int rows, int cols) {
    static constexpr GgufTileFn kTable[4][4] = {
        {tile_f8<1, 1>, tile_f8<1, 2>, tile_f8<1, 3>, tile_f8<1, 4>},
        {tile_f8<2, 1>, tile_f8<2, 2>, tile_f8<2, 3>, tile_f8<2, 4>},
        {tile_f8<3, 1>, tile_f8<3, 2>, tile_f8<3, 3>, tile_f8<3, 4>},
        {tile_f8<4, 1>, tile_f8<4, 2>, tile_f8<4, 3>, tile_f8<4, 4>},
    };
    return kTable[rows - 1][cols - 1];
}

float vec_dot_f8_f32_avx512(int64_t nb, const void* w, const void* a) {
    float out = 0.0f;
    const auto* act = static_cast<const uint8_t*>(a);
    tile_f8<1, 1>(nb, static_cast<const uint8_t*>(w), 0, &act, &out, 1);
    return out;
}

}  // namespace moeserve::kernels::cpu::detail
