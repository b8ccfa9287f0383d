// W4A16 linear layers: out = x @ W^T with W held as 4-bit codes (two per byte) and one f32 scale
// and zero point per (output row, group of group_size input columns): W[j, p] = scale[j, g] *
// (code[j, p] - zero[j, g]), g = p / group_size. Activations stay f32. The codes are widened to
// f32 in registers, so resident memory is the 4-bit codes plus the scales. Every int4 checkpoint
// format (compressed-tensors pack-quantized, AWQ, GPTQ) and load-time w4a16 map onto this one form.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moeserve/core/thread_pool.h"

namespace moeserve::kernels::cpu {

// Groups per row: ceil(k / group_size) (the last group may be partial).
inline int64_t int4_groups(int64_t k, int64_t group_size) { return (k + group_size - 1) / group_size; }

// n rows of an int4 matrix [n, k]. Row j: codes at codes + j * k / 2 (column 2i in the low nibble
// of byte i, 2i + 1 in the high one: the byte order of compressed-tensors' int32 packing),
// scale/zero at j * groups. k and group_size even.
struct Int4Weights {
    const uint8_t* codes = nullptr;  // [n, k / 2]
    const float* scale = nullptr;    // [n, groups]
    const float* zero = nullptr;     // [n, groups]: integers in [0, 16] (8 for symmetric 4-bit)
    int64_t n = 0, k = 0, group_size = 0;

    int64_t groups() const { return int4_groups(k, group_size); }
    // Rows [j0, j0 + count) as their own Int4Weights.
    Int4Weights rows(int64_t j0, int64_t count) const {
        return {codes + j0 * (k / 2), scale + j0 * groups(), zero + j0 * groups(), count, k, group_size};
    }
};

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
}  // namespace detail

}  // namespace moeserve::kernels::cpu
