// RMSNorm: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, per row, f32, as Hugging Face's
// Qwen3RMSNorm / DeepseekV3RMSNorm (variance in f32). Used for hidden states ([T, hidden]) and
// per-head q/k norms ([T * heads, head_dim]).
#pragma once

#include <cstdint>

#include "moeserve/core/thread_pool.h"

namespace moeserve::kernels::cpu {

// x, out f32 [rows, dim] (out may alias x); weight f32 [dim].
void rms_norm(ThreadPool& pool, const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out);
void rms_norm_ref(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out);

// Fused residual step: residual += x, then out = rms_norm(residual). Both f32 [rows, dim].
void add_rms_norm(ThreadPool& pool, float* residual, const float* x, const float* weight, int64_t rows, int64_t dim,
                  float eps, float* out);

}  // namespace moeserve::kernels::cpu
