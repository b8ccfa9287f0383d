// Linear layer y = x @ W^T (+ b). The weight stays in the checkpoint's precision: a bf16 view of
// the mapped file (zero-copy), or f32 (F32 kept as is, F16 converted to f32 at load).
#pragma once

#include <string>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::model {

class Linear {
public:
    Linear() = default;
    // Loads PREFIX.weight [out, in] (and PREFIX.bias [out] when has_bias).
    static Linear load(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                       int64_t in_features, bool has_bias = false);

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
