// W4A16 fused MoE experts: the grouping and SwiGLU of moe_experts_bf16 with int4 weights
// (linear_int4.h) and f32 activations throughout.
#pragma once

#include <cstdint>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/moe_experts.h"

namespace moeserve::kernels::cpu {

// As moe_experts_bf16: x f32 [num_tokens, hidden]; topk_ids int32 / topk_weights f32
// [num_tokens, k]; out f32 [num_tokens, hidden] overwritten.
void moe_experts_int4(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsInt4& experts, MoeScratch& scratch, float* out);

// Token by token, expert by expert, on dequantized rows (linear_int4_ref); for tests.
void moe_experts_int4_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                          const MoeExpertsInt4& experts, float* out);

}  // namespace moeserve::kernels::cpu
