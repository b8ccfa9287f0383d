// AVX2 dot products of FP8 weight rows (GgmlType::kF8E4M3x128) with f32 activation rows: the
// AVX-512 file's method (gguf_dot_f8_avx512.cpp says why the f16 move is exact) in 8 lanes. A
// tile takes its activation rows two at a time, so its accumulators fit the 16 registers; each
// pair still accumulates in its own lanes in one order, so tiles have the pair kernel's bits, and
// so do the tiles over rows widened beforehand (f8_widen_avx2, for many activation rows).
#include <immintrin.h>

#include <cstring>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot_isa.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu::detail {
namespace {

// 8 E4M3 bytes -> 8 f32, each times 2^-8.
inline __m256 widen8(const uint8_t* q) {
    __m128i h = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
    h = _mm_and_si128(_mm_srai_epi16(_mm_slli_epi16(h, 8), 1), _mm_set1_epi16(static_cast<short>(0xBFFF)));
    return _mm256_cvtph_ps(h);
}

constexpr int kPrefetchRows = 8;  // as the AVX-512 tiles: the rows decode reads next

// R weight rows times C (1 or 2) activation rows.
template <int R, int C>
void pass_f8(int64_t nb, const uint8_t* w, size_t w_stride, const float* const* act, float* out, int64_t ldo) {
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        const size_t at = static_cast<size_t>(b) * sizeof(BlockF8x128);
        float d[R];
        for (int r = 0; r < R; ++r) {
            const uint8_t* block = w + r * w_stride + at;
            std::memcpy(&d[r], block, 4);
            d[r] *= 256.0f;
            const uint8_t* ahead = block + kPrefetchRows * w_stride;
            _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(ahead + 64), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(ahead + 128), _MM_HINT_T0);
        }
        for (int k = 0; k < kQF8; k += 8) {
            __m256 x[C];
            for (int c = 0; c < C; ++c) x[c] = _mm256_loadu_ps(act[c] + b * kQF8 + k);
            for (int r = 0; r < R; ++r) {
                const __m256 wv = _mm256_mul_ps(widen8(w + r * w_stride + at + 4 + k), _mm256_set1_ps(d[r]));
                for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, x[c], acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) out[c * ldo + r] = simd::hsum(acc[r][c]);
    }
}

// The same products on rows widened beforehand (f8_widen_avx2), in the same order: the same bits.
template <int R, int C>
void pass_f32(int64_t nb, const uint8_t* w, size_t w_stride, const float* const* act, float* out, int64_t ldo) {
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    }
    const float* wf[R];
    for (int r = 0; r < R; ++r) wf[r] = reinterpret_cast<const float*>(w + r * w_stride);
    for (int64_t i = 0; i < nb * kQF8; i += 8) {
        __m256 x[C];
        for (int c = 0; c < C; ++c) x[c] = _mm256_loadu_ps(act[c] + i);
        for (int r = 0; r < R; ++r) {
            const __m256 wv = _mm256_loadu_ps(wf[r] + i);
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, x[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) out[c * ldo + r] = simd::hsum(acc[r][c]);
    }
}

// A tile as passes over two activation rows at a time (Pass: pass_f8 or pass_f32).
template <int R, int C, template <int, int> class Pass>
void in_pairs(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    static_assert(R >= 1 && R <= 4 && C >= 1 && C <= 4);
    const float* act[C];
    for (int c = 0; c < C; ++c) act[c] = reinterpret_cast<const float*>(a[c]);
    int c0 = 0;
    for (; c0 + 2 <= C; c0 += 2) Pass<R, 2>::run(nb, w, w_stride, act + c0, out + c0 * ldo, ldo);
    if (c0 < C) Pass<R, 1>::run(nb, w, w_stride, act + c0, out + c0 * ldo, ldo);
}

template <int R, int C>
struct F8Pass {
    static void run(int64_t nb, const uint8_t* w, size_t s, const float* const* a, float* o, int64_t ldo) {
        pass_f8<R, C>(nb, w, s, a, o, ldo);
    }
};
template <int R, int C>
struct F32Pass {
    static void run(int64_t nb, const uint8_t* w, size_t s, const float* const* a, float* o, int64_t ldo) {
        pass_f32<R, C>(nb, w, s, a, o, ldo);
    }
};

template <int R, int C>
void tile_f8(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    in_pairs<R, C, F8Pass>(nb, w, w_stride, a, out, ldo);
}
template <int R, int C>
void tile_f32(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out, int64_t ldo) {
    in_pairs<R, C, F32Pass>(nb, w, w_stride, a, out, ldo);
}

}  // namespace

void f8_widen_avx2(int64_t nb, int rows, const uint8_t* w, size_t w_stride, float* dst) {
    for (int r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* block = w + r * w_stride + static_cast<size_t>(b) * sizeof(BlockF8x128);
            float d;
            std::memcpy(&d, block, 4);
            const __m256 d256 = _mm256_set1_ps(d * 256.0f);
            float* out = dst + (r * nb + b) * kQF8;
            for (int k = 0; k < kQF8; k += 8) _mm256_storeu_ps(out + k, _mm256_mul_ps(widen8(block + 4 + k), d256));
        }
    }
}

GgufTileFn f32_tile_avx2(int rows, int cols) {
    static constexpr GgufTileFn kTable[4][4] = {
        {tile_f32<1, 1>, tile_f32<1, 2>, tile_f32<1, 3>, tile_f32<1, 4>},
        {tile_f32<2, 1>, tile_f32<2, 2>, tile_f32<2, 3>, tile_f32<2, 4>},
        {tile_f32<3, 1>, tile_f32<3, 2>, tile_f32<3, 3>, tile_f32<3, 4>},
        {tile_f32<4, 1>, tile_f32<4, 2>, tile_f32<4, 3>, tile_f32<4, 4>},
    };
    return kTable[rows - 1][cols - 1];
}

GgufTileFn f8_tile_avx2(int rows, int cols) {
    static constexpr GgufTileFn kTable[4][4] = {
        {tile_f8<1, 1>, tile_f8<1, 2>, tile_f8<1, 3>, tile_f8<1, 4>},
        {tile_f8<2, 1>, tile_f8<2, 2>, tile_f8<2, 3>, tile_f8<2, 4>},
        {tile_f8<3, 1>, tile_f8<3, 2>, tile_f8<3, 3>, tile_f8<3, 4>},
        {tile_f8<4, 1>, tile_f8<4, 2>, tile_f8<4, 3>, tile_f8<4, 4>},
    };
    return kTable[rows - 1][cols - 1];
}

float vec_dot_f8_f32_avx2(int64_t nb, const void* w, const void* a) {
    float out = 0.0f;
    const auto* act = static_cast<const uint8_t*>(a);
    tile_f8<1, 1>(nb, static_cast<const uint8_t*>(w), 0, &act, &out, 1);
    return out;
}

}  // namespace moeserve::kernels::cpu::detail
