// Linear layer y = x @ W^T (+ b). The weight is held in one representation (layers/linear_weight.h),
// chosen at load from the checkpoint's format and the run's quantization:
// - float: a bf16 view of the mapped file (zero-copy), or f32 (F32 kept as is, F16 converted at
//   load); FP8 block-scaled weights that do not run as FP8 become bf16, int8 ones f32; with
//   quant.f32_weights (--dtype float32) bf16 and widened FP8 weights become f32 too;
// - W8A8 (quant.scheme kW8A8Dynamic): int8 [out, in] with one f32 scale per output channel,
//   activations quantized per token;
// - ModelSlim static W8A8 / golden-stick A8W8: int8 weights, one per-tensor activation scale (or
//   one divisor per input channel) and zero point, an int32 bias added before the per-channel
//   dequantization scale (the linear_int8_static op);
// - blocks: a GGUF weight other than F32/BF16 in its stored blocks (formats/gguf_weights.h), or FP8
//   blocks (quant.fp8_module: formats/fp8_blocks.h), run by the gguf_linear op;
// - W4A16 / W4A8: int4 codes with group scales (formats/int4_weights.h), read from an int4
//   checkpoint (ModelSlim W4A8_DYNAMIC too) or quantized at load, run by the linear_int4 op with
//   f32 or per-token int8 activations.
#pragma once

#include <string>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/layers/linear_weight.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

class Linear {
public:
    Linear() = default;
    // Loads PREFIX.weight [out, in] (and PREFIX.bias [out] when has_bias) in the representation
    // quant.scheme(PREFIX, precision) and the stored type say; `precision` is the layer's, said by
    // the code that builds it (quantization.h).
    static Linear load(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                       int64_t in_features, bool has_bias = false, const Quantization& quant = {},
                       LayerPrecision precision = LayerPrecision::kQuantizable);

    // Loads the `shard` of PREFIX.weight [out_features, in_features] (and of its bias rows)
    // (weight_rectangle; FP8 and int4 weights read only the shard's rectangle).
    static Linear load_shard(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                             int64_t in_features, const LinearShard& shard, bool has_bias = false,
                             const Quantization& quant = {}, LayerPrecision precision = LayerPrecision::kQuantizable);

    // x f32 [rows, in] -> out f32 [rows, out].
    void forward(ThreadPool& pool, const float* x, int64_t rows, float* out) const;

    int64_t in_features() const { return weight_cols(weight_); }
    int64_t out_features() const { return weight_rows(weight_); }
    size_t weight_bytes() const { return weight_nbytes(weight_); }
    const LinearWeight& weight() const { return weight_; }

private:
    LinearWeight weight_;
    Tensor bias_;  // f32 [out_features], or empty

    // load() before the weight is repacked for the kernels (a shard is cut from the stored rows).
    static Linear load_stored(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                              int64_t in_features, bool has_bias, const Quantization& quant, LayerPrecision precision);
    // The weight repacked where the kernels have a layout for it: GGUF blocks in the mapping
    // (formats/gguf_weights.h gguf_pack_for_kernels), bf16 rows into the backend's panels (the
    // bf16_linear_packed_bytes op); `name` is the tensor they came from, whose mapped pages
    // leave the resident set.
    void pack_for_kernels(const io::WeightSource& weights, const std::string& name);
    // FP8 weight PREFIX.weight of `shape`, the shard's rectangle repacked into FP8 blocks.
    static Linear load_fp8(const io::WeightSource& weights, const std::string& prefix, const Shape& shape,
                           const LinearShard& shard, bool has_bias, const Quantization& quant);
};

}  // namespace moeserve::model
