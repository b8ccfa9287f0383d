// ModelSlim W4A8_DYNAMIC weights: msModelSlim's int4 linears and experts (the Ascend W4A8
// DeepSeek-V3/R1 and Qwen3-MoE checkpoints; routed experts W4A8_DYNAMIC, the rest W8A8 or
// W8A8_DYNAMIC), read as vllm-ascend reads them into the one int4 form (int4_weights.h):
//   PREFIX.weight I8, either [rows / 2, cols] (the "1.0.0" saver: two rows per byte, row 2i in the
//     low nibble of byte (i, p), row 2i + 1 in the high one, each a signed 4-bit value) or
//     [rows, cols] (older savers: one value in [-8, 7] per byte);
//   PREFIX.weight_scale [rows, 1] and, per group of G input columns, PREFIX.weight_scale_second
//     [rows, cols / G] (absent: one group per row);
//   PREFIX.weight_offset / weight_offset_second: zeros (symmetric; check_weight_offset_zero);
//   PREFIX.scale_bias: a correction the NPU's int8 x int4 kernel needs (8 * the row sums), not
//     part of the weight; not read.
// w[j, p] = weight_scale[j] * weight_scale_second[j, p / G] * q[j, p]. In the int4 form: code
// q + 8, zero 8, the group's scale the f32 product of the two (vllm-ascend rounds that product
// to f16 for its NPU kernel; moeserve keeps f32). Activations: per-token symmetric int8 (W4A8).
#pragma once

#include <string>

#include "moeserve/io/weight_source.h"
#include "moeserve/model/formats/int4_weights.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

// Whether quant is a ModelSlim checkpoint whose description gives PREFIX.weight the type
// W4A8_DYNAMIC.
bool modelslim_w4a8(const Quantization& quant, const std::string& prefix);

// PREFIX's W4A8_DYNAMIC weight [rows, cols] in the int4 form. Errors kInvalidModel name the
// tensor (a missing scale, a shape that is neither layout, a second scale whose width does not
// divide cols, a value outside [-8, 7]); kUnsupported a nonzero offset.
Int4Matrix read_modelslim_w4a8(const io::WeightSource& weights, const std::string& prefix, int64_t rows, int64_t cols);

}  // namespace moeserve::model
