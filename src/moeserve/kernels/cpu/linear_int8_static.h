// Static W8A8 linear layers (Ascend ModelSlim "W8A8"): the activations are quantized with one
// per-tensor scale and zero point fixed at calibration, q = sat8(rint(x * x_mul + x_zero)) (or, for
// MindSpore golden-stick A8W8, a per-input-channel divisor: q = sat8(rint(x / x_div[p] + x_zero)))
// with q in the full range [-128, 127], the int8 x int8 product is exact in int32, an int32 bias is
// added, and the sum is dequantized once per output channel:
//   out[i, j] = (float(sum_p q[i, p] * w[j, p]) + float(bias[j])) * deq_scale[j]
// (f32 sums: exact while |acc|, |bias| < 2^24, a relative 6e-8 otherwise).
// The int8 tiles run on every ISA level (ref, AVX2 through int16 products, AVX-512 VNNI through
// u8 = q + 128 with 128 * sum w taken back out), bit-exact with the scalar reference.
#pragma once

#include <cstdint>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/weight_types.h"
#include "moeserve/kernels/cpu/linear_int8.h"

namespace moeserve::kernels::cpu {

// x f32 [m, k] -> q int8 [m, ldq]: q = clamp(rint(fp32(x * x_mul) + x_zero), -128, 127), two f32
// roundings (no fused multiply-add), ties to even. Columns [k, ldq) are set to zero.
void quantize_rows_int8_static(const float* x, int64_t m, int64_t k, float x_mul, float x_zero, int8_t* q, int64_t ldq);
// As above with a per-column divisor x_div f32 [k]: q = clamp(rint(fp32(x / x_div[p]) + x_zero)).
void quantize_rows_int8_static_div(const float* x, int64_t m, int64_t k, const float* x_div, float x_zero, int8_t* q,
                                   int64_t ldq);

// out f32 [m, n] as in the header comment. m >= 0, k < 2^16 (no int32 overflow of the full-range
// products plus the bias). out must not alias x. Threads split the n outputs.
void linear_int8_static(ThreadPool& pool, const float* x, int64_t m, const StaticInt8Weights& w, float* out,
                        Int8Scratch& scratch);

// Scalar reference (bit-exact with linear_int8_static).
void linear_int8_static_ref(const float* x, int64_t m, const StaticInt8Weights& w, float* out);

namespace detail {
// int8 tile for activations that may be -128: out[i * ldo + j] = float(sum_p qx[i * ldx + p] *
// w[j * k + p]) for i < m, j < n (ldx >= int8_padded_cols(k), zeros past k). ones: max(m, n)
// values 1.0f (the unit scales handed to the scaled tiles).
void matmul_tile_int8_full(const int8_t* qx, int64_t ldx, int64_t m, int64_t k, const int8_t* w, int64_t n, float* out,
                           int64_t ldo, const float* ones);
}  // namespace detail

}  // namespace moeserve::kernels::cpu
