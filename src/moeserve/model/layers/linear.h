// Linear layer y = x @ W^T (+ b). The weight stays in the checkpoint's precision: a bf16 view of
// the mapped file (zero-copy), or f32 (F32 kept as is, F16 converted to f32 at load).
#pragma once

#include <string>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::model {

// A rectangle of the full [out, in] weight that one rank holds (tensor parallelism): rows
// [row_begin, row_begin + rows) (column-parallel: a slice of the outputs) and columns
// [col_begin, col_begin + cols) (row-parallel: a slice of the inputs). rows/cols < 0: all.
struct LinearShard {
    int64_t row_begin = 0, rows = -1;
    int64_t col_begin = 0, cols = -1;
};

class Linear {
public:
    Linear() = default;
    // Loads PREFIX.weight [out, in] (and PREFIX.bias [out] when has_bias).
    static Linear load(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                       int64_t in_features, bool has_bias = false);

    // Loads the `shard` of PREFIX.weight [out_features, in_features] (and of its bias rows). A row
    // slice stays a zero-copy view; a column slice is copied (same dtype).
    static Linear load_shard(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                             int64_t in_features, const LinearShard& shard, bool has_bias = false);

    // x f32 [rows, in] -> out f32 [rows, out].
    void forward(ThreadPool& pool, const float* x, int64_t rows, float* out) const;

    int64_t in_features() const { return weight_.dim(1); }
    int64_t out_features() const { return weight_.dim(0); }
    size_t weight_bytes() const { return weight_.nbytes(); }

private:
    TensorView weight_;  // bf16 | f32 [out_features, in_features]
    Tensor owned_;       // backing store when the weight had to be converted
    Tensor bias_;        // f32 [out_features], or empty
};

}  // namespace moeserve::model
