// DeepSeek's block-scaled FP8 weights run as stored (W8A16; issue #27): each row's 128-column
// blocks are repacked at load as kernels' GgmlType::kF8E4M3x128 blocks (the f32 block scale, then
// the 128 E4M3 bytes: 3 % above the checkpoint's bytes), which the GGUF dot-product tiles and
// experts code run in place (the gguf_linear and gguf_moe_experts ops), widening the weights in registers. A
// weight whose columns are not whole 128-wide blocks (only tiny test models have such; a
// tensor-parallel split that cuts a block) is widened to bf16 at load instead.
#pragma once

#include <string>

#include "moeserve/core/tensor.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/weight_types.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

// Whether columns [col0, col0 + cols) of weight `name` can run as FP8: the tensor is F8_E4M3, the
// checkpoint's blocks are 128 columns wide, and the columns cover whole blocks.
bool fp8_packable(const io::WeightSource& weights, const std::string& name, const Quantization& quant, int64_t col0,
                  int64_t cols);

// Rows [row0, +rows) x columns [col0, +cols) of FP8 weight `name` (shape [out, in], checked), with
// their block scales, as kF8E4M3x128 rows at dst (rows * cols / 128 blocks). fp8_packable must hold.
// Error kInvalidModel naming the tensor when its scales are missing or of another size.
void pack_fp8_rows(const io::WeightSource& weights, const std::string& name, const Shape& shape, int64_t row0,
                   int64_t rows, int64_t col0, int64_t cols, const Quantization& quant, uint8_t* dst);

// Bytes of `rows` packed rows of `cols` columns.
size_t fp8_packed_bytes(int64_t rows, int64_t cols);

// The packed rows at data as a matrix for the kernels.
kernels::GgufMatrix fp8_matrix(const uint8_t* data, int64_t rows, int64_t cols);

}  // namespace moeserve::model
