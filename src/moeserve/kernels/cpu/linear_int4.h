// W4A16 linear layers: out = x @ W^T with W held as 4-bit codes (two per byte) and one f32 scale
// and zero point per (output row, group of group_size input columns): W[j, p] = scale[j, g] *
// (code[j, p] - zero[j, g]), g = p / group_size. Activations stay f32. The codes are widened to
// f32 in registers, so resident memory is the 4-bit codes plus the scales. Every int4 checkpoint
// format (compressed-tensors pack-quantized, AWQ, GPTQ) and load-time w4a16 map onto this one form.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/weight_types.h"

namespace moeserve::kernels::cpu {

// out f32 [m, w.n] = x f32 [m, w.k] @ W^T. Rows contiguous; out must not alias x. Threads split
// the output columns.
void linear_int4(ThreadPool& pool, const float* x, int64_t m, const Int4Weights& w, float* out);

// Scalar reference: each weight row dequantized to f32 (dequantize_int4_row), then f32 dot
// products in column order. For tests.
void linear_int4_ref(const float* x, int64_t m, const Int4Weights& w, float* out);

// Row j of w as f32 [w.k]: scale * (code - zero), one rounding per element.
void dequantize_int4_row(const Int4Weights& w, int64_t j, float* out);

namespace detail {
// Single-threaded tile: out[i * ldo + j] = sum_p x[i * ldx + p] * W[j, p] for i < m, j < w.n, at
// the active ISA level (dispatch.cpp).
void matmul_tile_int4(const float* x, int64_t ldx, int64_t m, const Int4Weights& w, float* out, int64_t ldo);
void matmul_tile_int4_ref(const float* x, int64_t ldx, int64_t m, const Int4Weights& w, float* out, int64_t ldo);
void matmul_tile_int4_avx2(const float* x, int64_t ldx, int64_t m, const Int4Weights& w, float* out, int64_t ldo);
// AVX-512: few rows (decode) widen 32 codes at a time; many (prefill) run the avx512 f32 GEMM on
// panels widened from the codes; shapes neither takes, the AVX2 tile.
void matmul_tile_int4_avx512(const float* x, int64_t ldx, int64_t m, const Int4Weights& w, float* out, int64_t ldo);
}  // namespace detail

}  // namespace moeserve::kernels::cpu
