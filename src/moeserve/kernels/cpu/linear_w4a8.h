// W4A8: the int4 weights of linear_int4.h (4-bit codes, an f32 scale and an integer zero point per
// row and group) against activations quantized per token to int8 (symmetric, absmax / 127, the
// rounding of quantize_int8.h), with the integer products summed exactly per group:
//   out[i, j] = sx[i] * sum_g scale[j, g] * (sum_{p in g} code[j, p] * q[i, p] - zero[j, g] * qsum[i, g])
// where qsum[i, g] is the sum of q[i, p] over the group. So the codes need no widening: the AVX-512
// tile feeds them to vpdpbusd as unsigned bytes (code x q), the AVX2 tile to vpmaddubsw, and the
// zero point is one product per group. Int4Weights::int8_activations selects this path inside
// linear_int4 and moe_experts_int4 (ModelSlim W4A8_DYNAMIC, --quantization w4a8).
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/weight_types.h"

namespace moeserve::kernels::cpu {

// The quantized activation rows' column order: per chunk of 128 columns, the 64 even columns, then
// the 64 odd ones (a code byte holds an even column in its low nibble and the next odd one in its
// high nibble, so each nibble plane meets its activations in place). Rows are padded with zeros to
// a whole chunk.
inline constexpr int64_t kW4a8Chunk = 128;
inline constexpr int64_t w4a8_padded_cols(int64_t k) { return (k + kW4a8Chunk - 1) / kW4a8Chunk * kW4a8Chunk; }
// Where column p sits in that order.
inline int64_t w4a8_position(int64_t p) {
    const int64_t i = p % kW4a8Chunk;
    return p - i + (i % 2 == 0 ? i / 2 : kW4a8Chunk / 2 + i / 2);
}

// m quantized rows: q int8 [m, ldq] (chunk order), sx f32 [m], qsum f32 [m, ldg] (exact integers).
struct W4a8Rows {
    const int8_t* q = nullptr;
    const float* sx = nullptr;
    const float* qsum = nullptr;
    int64_t ldq = 0, ldg = 0;
    // Rows [i0, ...) as their own W4a8Rows.
    W4a8Rows from(int64_t i0) const { return {q + i0 * ldq, sx + i0, qsum + i0 * ldg, ldq, ldg}; }
};

// Storage for quantize_w4a8_rows, grown on demand.
struct W4a8Buffer {
    std::vector<int8_t> q;
    std::vector<float> sx, qsum;
};

// x f32 [m, k] (row stride ldx) quantized per row (quantize_rows_int8: bit-exact with its
// reference) into buf, in the chunk order, with the sums per group of group_size columns. pool
// (may be null): many rows are split over its threads.
W4a8Rows quantize_w4a8_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t group_size, W4a8Buffer& buf,
                            ThreadPool* pool = nullptr);

namespace detail {
// Single-threaded tile: out[i * ldo + j] for i < m, j < w.n, at the active ISA level
// (dispatch.cpp). The ref tile sums the groups in order in f32 (the formula above); the vector
// tiles sum per 8-column lane and subtract the zero points' products at the end, so they differ
// from it only in the order of the f32 sums.
void matmul_tile_w4a8(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo);
void matmul_tile_w4a8_ref(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo);
void matmul_tile_w4a8_avx2(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo);
void matmul_tile_w4a8_avx512(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo);
// Whether the vector tiles take w's shape: k a multiple of 32, and one group per row or groups that
// are whole multiples of 128 columns or divide 128 (32, 64). Other shapes run the ref tile.
bool w4a8_vector_shape(const Int4Weights& w);
}  // namespace detail

}  // namespace moeserve::kernels::cpu
