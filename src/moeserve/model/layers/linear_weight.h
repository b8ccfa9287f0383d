// The weight of one linear layer, held in the one representation its kernel runs. The loaders
// (layers/linear.cpp with the formats under model/formats/) build one; Linear holds it with its
// bias, and forward dispatches on it (run_linear).
#pragma once

#include <string>
#include <variant>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/weight_types.h"
#include "moeserve/model/formats/int4_weights.h"

namespace moeserve::model {

// bf16 | f32 [out, in]: a view of the mapped file (zero-copy), or of `owned` when converted.
// bf16 weights the backend has a layout for are repacked once loaded (Linear::pack_for_kernels,
// the linear_bf16_packed op): then `packed` holds them, the kernels read only that, and view keeps
// the shape (its data is null once `owned` has been released; mapped pages are dropped from the
// resident set).
struct FloatWeight {
    TensorView view;
    Tensor owned;
    Tensor packed;
};

// W8A8: int8 [out, in] with one f32 scale per output row; activations quantized per token.
struct DynamicInt8Weight {
    Tensor data, scale;
};

// ModelSlim static W8A8: int8 [out, in], deq_scale f32 [out], quant_bias int32 [out] (empty on
// the TP ranks that do not add it); activations x * x_mul + x_zero, or x / x_div[k] + x_zero when
// x_div (f32 [in], golden-stick A8W8) is set (the linear_int8_static op, kernels/ops.h).
struct StaticInt8Weight {
    Tensor data, deq_scale, quant_bias;
    float x_mul = 1.0f, x_zero = 0.0f;
    Tensor x_div;
};

// Blocks the GGUF kernels run: a GGUF weight in the file's mapping (formats/gguf_weights.h), or
// FP8 blocks repacked into `owned` (formats/fp8_blocks.h).
struct BlockWeight {
    kernels::GgufMatrix matrix;
    Tensor owned;
};

// W4A16 / W4A8: int4 codes with group scales (formats/int4_weights.h).
struct Int4Weight {
    Int4Matrix matrix;
    bool int8_activations = false;  // W4A8
    kernels::Int4Weights view() const {
        kernels::Int4Weights v = matrix.view();
        v.int8_activations = int8_activations;
        return v;
    }
};

using LinearWeight = std::variant<FloatWeight, DynamicInt8Weight, StaticInt8Weight, BlockWeight, Int4Weight>;

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

int64_t weight_rows(const LinearWeight& w);
int64_t weight_cols(const LinearWeight& w);
size_t weight_nbytes(const LinearWeight& w);

// The shard's rectangle of a full weight held in memory: a row slice of a mapped float weight
// stays a view; other float and int8 slices are copied (the per-row scales of the full rows stay
// valid for a column slice; a static weight's per-tensor activation quantization is elementwise,
// so the partial sums of a column slice add up, and quant_bias is kept where adds_constants());
// GGUF / FP8 blocks are cut at block boundaries (error naming `name` where the split is not).
// An Int4Weight is not cut here: its loader reads the rectangle (load_int4_rectangle).
LinearWeight weight_rectangle(const LinearWeight& full, const LinearShard& shard, const std::string& name);

// x f32 [rows, in] -> out f32 [rows, out] = x @ W^T, by the weight's kernel.
void run_linear(ThreadPool& pool, const LinearWeight& w, const float* x, int64_t rows, float* out);

}  // namespace moeserve::model
