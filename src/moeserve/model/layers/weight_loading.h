// Helpers shared by the layers to fetch checkpoint tensors with shape checks.
#pragma once

#include <string>

#include "moeserve/core/tensor.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::model {

// A tensor with the expected shape (any dtype); Error kInvalidModel naming it otherwise.
TensorView get_checked(const io::WeightSource& weights, const std::string& name, const Shape& shape);

// A 1-D parameter (norm gain, bias) converted to f32 [n].
Tensor load_vector_f32(const io::WeightSource& weights, const std::string& name, int64_t n);

// An optional 1-D parameter: f32 [n] when the checkpoint has `name`, else empty. ModelSlim's
// anti-outlier pass leaves RMSNorm biases (RMSNorm(x) * w + b; <norm>.bias).
Tensor load_optional_vector_f32(const io::WeightSource& weights, const std::string& name, int64_t n);

// `view`, or, when f32 is set and `view` is bf16, its f32 widening stored in `owned` (which must
// outlive the result): the --dtype float32 path of weights read as views (embeddings, MLA's kv_b).
TensorView widen_to_f32_if(const TensorView& view, bool f32, Tensor& owned);

// x [rows, n] += bias [n] per row; no-op for an empty bias.
void add_row_bias(const Tensor& bias, float* x, int64_t rows, int64_t n);

}  // namespace moeserve::model
