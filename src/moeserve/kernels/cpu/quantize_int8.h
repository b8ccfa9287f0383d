// Symmetric per-row int8 quantization, used both for weights at load time (one scale per output
// channel) and for activations at run time (dynamic, one scale per token): s = max|row| / 127,
// q = round_half_even(x * (127 / max|row|)), so q is in [-127, 127] and x ~ q * s.
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu {

// Rows padded to this many int8 columns by the int8 matmuls (zeros past k).
inline constexpr int64_t kInt8RowAlign = 32;
// k rounded up to kInt8RowAlign: the row stride of quantized activations.
inline constexpr int64_t int8_padded_cols(int64_t k) { return (k + kInt8RowAlign - 1) / kInt8RowAlign * kInt8RowAlign; }

// x f32 [m, k] (row stride ldx) -> q int8 [m, ldq] and scales f32 [m]. Columns [k, ldq) of q are
// set to zero. An all-zero row gets scale 0 and q = 0. ldq >= k, ldx >= k. Single-threaded.
// Bit-exact with quantize_rows_int8_ref.
void quantize_rows_int8(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* q, int64_t ldq, float* scales);

// Scalar reference.
void quantize_rows_int8_ref(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* q, int64_t ldq, float* scales);

}  // namespace moeserve::kernels::cpu
