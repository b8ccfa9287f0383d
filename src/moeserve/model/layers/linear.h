// Linear layer y = x @ W^T (+ b). The weight stays in the checkpoint's precision: a bf16 view of
// the mapped file (zero-copy), or f32 (F32 kept as is, F16 converted to f32 at load); FP8
// block-scaled weights run as FP8 (quant.fp8_module: repacked into gguf_, formats/fp8_blocks.h)
// or become bf16, int8 ones f32; with quant.f32_weights (--dtype float32) bf16 and widened FP8
// weights become f32 too. All unless the layer runs W8A8: then int8
// [out, in] with one f32 scale per output channel, activations quantized per token. A ModelSlim
// static W8A8 linear keeps int8 weights, one per-tensor activation scale (golden-stick A8W8: one
// divisor per input channel) and zero point, an int32 bias added before the per-channel
// dequantization scale (kernels/cpu/linear_int8_static.h). A GGUF weight other than F32/BF16
// stays in its stored blocks (gguf_: formats/gguf_weights.h), run by kernels/cpu/gguf_linear.h.
// A W4A16 linear holds int4 codes with group scales (w4_: formats/int4_weights.h), read from an
// int4 checkpoint or quantized at load, run by kernels/cpu/linear_int4.h.
#pragma once

#include <string>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/cpu/gguf_linear.h"
#include "moeserve/model/formats/int4_weights.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

// A rectangle of the full [out, in] weight that one rank holds (tensor parallelism): rows
// [row_begin, row_begin + rows) (column-parallel: a slice of the outputs) and columns
// [col_begin, col_begin + cols) (row-parallel: a slice of the inputs). rows/cols < 0: all.
struct LinearShard {
    int64_t row_begin = 0, rows = -1;
    int64_t col_begin = 0, cols = -1;
    // Whether this rank adds the per-output constants that must be added once over a row-parallel
    // TP group (a static W8A8 quant_bias; the float bias has its own has_bias flag). Default: the
    // rank that holds the first columns.
    bool adds_constants() const { return col_begin == 0; }
};

class Linear {
public:
    Linear() = default;
    // Loads PREFIX.weight [out, in] (and PREFIX.bias [out] when has_bias). With
    // quant.int8_module(PREFIX, precision) the weight is kept (I8 checkpoint) or made per-channel
    // int8; `precision` is the layer's, said by the code that builds it (quantization.h).
    static Linear load(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                       int64_t in_features, bool has_bias = false, const Quantization& quant = {},
                       LayerPrecision precision = LayerPrecision::kQuantizable);

    // Loads the `shard` of PREFIX.weight [out_features, in_features] (and of its bias rows). A row
    // slice stays a zero-copy view; a column slice is copied (same dtype).
    static Linear load_shard(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                             int64_t in_features, const LinearShard& shard, bool has_bias = false,
                             const Quantization& quant = {}, LayerPrecision precision = LayerPrecision::kQuantizable);

    // x f32 [rows, in] -> out f32 [rows, out].
    void forward(ThreadPool& pool, const float* x, int64_t rows, float* out) const;

    int64_t in_features() const {
        return is_gguf() ? gguf_.cols : is_int4() ? w4_.cols() : int8_ || static_ ? w8_.dim(1) : weight_.dim(1);
    }
    int64_t out_features() const {
        return is_gguf() ? gguf_.rows : is_int4() ? w4_.rows() : int8_ || static_ ? w8_.dim(0) : weight_.dim(0);
    }
    size_t weight_bytes() const;
    bool is_int8() const { return int8_ || static_; }
    bool is_gguf() const { return gguf_.data != nullptr; }
    bool is_static_int8() const { return static_; }
    bool is_int4() const { return !w4_.codes.empty(); }

private:
    TensorView weight_;  // bf16 | f32 [out_features, in_features]
    Tensor owned_;       // backing store when the weight had to be converted
    Tensor bias_;        // f32 [out_features], or empty
    bool int8_ = false;  // W8A8: w8_ int8 [out_features, in_features], w8_scale_ f32 [out_features]
    Tensor w8_, w8_scale_;
    // static W8A8 (ModelSlim): w8_ int8 [out, in], w8_scale_ = deq_scale f32 [out], quant_bias_
    // int32 [out] (empty on the TP ranks that do not add it), activations x * x_mul_ + x_zero_, or
    // x / x_div_[k] + x_zero_ when x_div_ (f32 [in], golden-stick A8W8) is set
    bool static_ = false;
    Tensor quant_bias_;
    float x_mul_ = 1.0f, x_zero_ = 0.0f;
    Tensor x_div_;
    // GGUF blocks [out_features, in_features] in the file's mapping, or FP8 blocks in owned_ (data
    // null: neither)
    kernels::cpu::GgufMatrix gguf_;
    Int4Matrix w4_;  // W4A16 (codes empty: not int4)

    // FP8 weight PREFIX.weight of `shape`, the shard's rectangle repacked into owned_ (gguf_ views it).
    static Linear load_fp8(const io::WeightSource& weights, const std::string& prefix, const Shape& shape,
                           const LinearShard& shard, bool has_bias, const Quantization& quant);
    // The f32 weight of a linear whose checkpoint stores it as int4 but which runs in high
    // precision (a kHigh / kDequantized layer, an ignored module, --quantization none).
    static Linear dequantized_int4(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                                   int64_t in_features, const Quantization& quant);
};

}  // namespace moeserve::model
