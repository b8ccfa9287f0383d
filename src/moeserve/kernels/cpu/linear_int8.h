// W8A8 linear layers: out = x @ W^T with W int8 [n, k] and one f32 scale per output channel, the
// activations quantized on the fly per token (symmetric, absmax / 127), an int8 x int8 -> int32
// dot product, then out[i, j] = float(dot) * (x_scale[i] * w_scale[j]). AVX2 without VNNI.
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/core/thread_pool.h"

namespace moeserve::kernels::cpu {

// Per-call buffers of linear_int8 (quantized activations), grown on demand.
struct Int8Scratch {
    std::vector<int8_t> qx;
    std::vector<float> sx;
};

// out f32 [m, n] = dequant(quant(x f32 [m, k])) @ dequant(w int8 [n, k], w_scale f32 [n])^T, the
// product taken exactly in int32 and rescaled once. Rows contiguous. m >= 0, n >= 1, k >= 1,
// k < 2^17 (no int32 overflow). w entries may be -128. out must not alias x.
void linear_int8(ThreadPool& pool, const float* x, int64_t m, int64_t k, const int8_t* w, const float* w_scale,
                 int64_t n, float* out, Int8Scratch& scratch);

// Scalar reference: quantize_rows_int8_ref, int32 dot products, same rescale (bit-exact with
// linear_int8).
void linear_int8_ref(const float* x, int64_t m, int64_t k, const int8_t* w, const float* w_scale, int64_t n,
                     float* out);

namespace detail {
// Single-threaded int8 tile: out[i * ldo + j] = float(sum_p qx[i * ldx + p] * w[j * k + p]) *
// (sx[i] * sw[j]) for i < m, j < n. qx rows hold k values then zeros up to ldx >= int8_padded_cols(k).
void matmul_tile_int8(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                      const float* sw, int64_t n, float* out, int64_t ldo);
}  // namespace detail

}  // namespace moeserve::kernels::cpu
