// W8A8 fused MoE experts: the same computation and grouping as moe_experts_bf16 with int8
// weights (one f32 scale per output row) and dynamic per-token int8 activations: each token's
// hidden state is quantized once for gate|up, and each token's SwiGLU output once for down.
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/cpu/moe_experts.h"

namespace moeserve::kernels::cpu {

// MoeInt8Scratch (the int8 path's extra buffers) is in moe_experts.h, inside MoeScratch.

// As moe_experts_bf16: x f32 [num_tokens, hidden]; topk_ids int32 / topk_weights f32
// [num_tokens, k]; out f32 [num_tokens, hidden] overwritten. Matches the reference up to the
// vectorized exp in SwiGLU (which can move a quantized activation by one step).
void moe_experts_int8(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsInt8& experts, MoeScratch& scratch,
                      MoeInt8Scratch& qscratch, float* out);

// Token by token, expert by expert (uses the scalar quantize/dot references); for tests.
void moe_experts_int8_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                          const MoeExpertsInt8& experts, float* out);

}  // namespace moeserve::kernels::cpu
