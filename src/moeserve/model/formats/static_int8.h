// Static W8A8 linears: int8 weights with a per-tensor activation scale and zero point, an int32
// bias added before the per-channel dequantization scale (ModelSlim "W8A8"), or a divisor per
// input channel (golden-stick A8W8 attention); run by the linear_int8_static op (kernels/ops.h).
#pragma once

#include <string>

#include "moeserve/core/tensor.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::model {

// Static W8A8 (ModelSlim "W8A8", golden-stick A8W8 attention) weights of one linear [out, in].
struct StaticInt8Matrix {
    Tensor data;                                    // int8 [out, in]
    Tensor deq_scale;                               // f32 [out] (decoded from F32, or from I64 holding f32 bits)
    Tensor quant_bias;                              // int32 [out]
    float input_scale = 1.0f, input_offset = 0.0f;  // ModelSlim: per-tensor s_x; both: the zero point z_x
    float x_mul = 1.0f;                             // ModelSlim: bf16(1 / bf16(s_x)), what multiplies x
    Tensor x_div;                                   // golden-stick: f32 [in], what divides x; else empty
};

// Loads PREFIX.{weight, input_scale, input_offset, deq_scale, quant_bias} of a static W8A8 linear,
// checking dtypes and shapes (Error kInvalidModel naming the tensor: e.g. a deq_scale that is
// neither F32 nor I64, an input_offset that is not an integer). golden_stick: input_scale is a
// BF16/F16/F32 divisor per input channel ([in], or [1] for all), input_offset I8 [in] or [1] with
// one value (golden-stick tiles its z_x), as the MindFormers converter presents them.
StaticInt8Matrix load_static_int8(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                                  int64_t in_features, bool golden_stick = false);

// The single value of a [1] (or []) per-tensor parameter of a static W8A8 linear (input_scale,
// input_offset), as f32. Error kInvalidModel naming the tensor when it is missing, has more
// values or is not a float.
float scalar_param(const io::WeightSource& weights, const std::string& name);

}  // namespace moeserve::model
