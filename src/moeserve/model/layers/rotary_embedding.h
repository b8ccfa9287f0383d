// Rotary embedding tables (cos/sin per position) for default, linear and YaRN RoPE, computed as
// Hugging Face's rope initializers do, and applied by the apply_rope op (kernels/ops.h).
#pragma once

#include <cstdint>

#include "moeserve/core/tensor.h"
#include "moeserve/kernels/rope_types.h"
#include "moeserve/model/layers/rope_scaling.h"

namespace moeserve::model {

class RotaryEmbedding {
public:
    // rotary_dim: rotated dims per head (even). num_positions: table length (max model length).
    // max_position_embeddings: config value (YaRN's original length falls back to it).
    RotaryEmbedding(const RopeScaling& rope, int64_t rotary_dim, int64_t num_positions, int64_t max_position_embeddings,
                    kernels::RopeStyle style);

    // Rotates x f32 [num_tokens, num_heads, head_stride] (token stride given) in place.
    void apply(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_stride, int64_t token_stride,
               const int32_t* positions) const;

    int64_t num_positions() const { return cos_.dim(0); }
    // YaRN's cos/sin magnitude (already folded into the tables); 1 otherwise.
    double attention_factor() const { return attention_factor_; }

    // YaRN's mscale helper: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1.
    static double yarn_mscale(double scale, double mscale);

private:
    int64_t rotary_dim_;
    kernels::RopeStyle style_;
    double attention_factor_ = 1.0;
    Tensor cos_;  // f32 [num_positions, rotary_dim / 2]
    Tensor sin_;  // f32 [num_positions, rotary_dim / 2]
};

}  // namespace moeserve::model
