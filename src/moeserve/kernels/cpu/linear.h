// Linear layers: out = x @ W^T, the PyTorch nn.Linear convention, W row-major [out_features,
// in_features] exactly as in the checkpoint. f32 activations and accumulation; weights bf16
// (2 bytes each, as loaded) or f32. Picks a GEMV path for few rows (decode) and a blocked GEMM
// for many (prefill). Kernels never see the model; they take raw pointers, shapes and a pool.
#pragma once

#include <cstdint>

#include "moeserve/core/thread_pool.h"

namespace moeserve::kernels::cpu {

// out f32 [m, n] = x f32 [m, k] @ w bf16 [n, k]^T. Rows of x and out are contiguous
// (leading dimensions k and n). m >= 0, n >= 1, k >= 1. out must not alias x.
void linear_bf16(ThreadPool& pool, const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out);

// Same with f32 weights.
void linear_f32(ThreadPool& pool, const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* out);

// Scalar references (single thread, obviously correct), used by the tests.
void linear_bf16_ref(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out);
void linear_f32_ref(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* out);

}  // namespace moeserve::kernels::cpu
