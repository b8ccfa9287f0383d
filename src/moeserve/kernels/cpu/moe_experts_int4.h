// W4A16 fused MoE experts: the grouping and SwiGLU of moe_experts_bf16 with int4 weights
// (linear_int4.h) and f32 activations throughout.
#pragma once

#include <cstdint>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/moe_experts.h"

namespace moeserve::kernels::cpu {

// int4 weights of the experts this rank holds: global ids [expert_begin, expert_begin + num_experts).
struct MoeExpertsInt4 {
    Int4Weights gate_up;  // [num_experts * 2 * inter, hidden]: expert e's inter gate rows, then its inter up rows
    Int4Weights down;     // [num_experts * hidden, inter]
    int64_t num_experts = 0;
    int64_t expert_begin = 0;
    int64_t hidden = 0;
    int64_t inter = 0;
    // GPTQ act order (desc_act), or null: expert e's gate/up columns i multiply x[gate_up_perm[e * hidden + i]],
    // its down columns i act[down_perm[e * inter + i]]. The activations are gathered once per (token, expert).
    const int32_t* gate_up_perm = nullptr;
    const int32_t* down_perm = nullptr;
};

// As moe_experts_bf16: x f32 [num_tokens, hidden]; topk_ids int32 / topk_weights f32
// [num_tokens, k]; out f32 [num_tokens, hidden] overwritten.
void moe_experts_int4(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsInt4& experts, MoeScratch& scratch, float* out);

// Token by token, expert by expert, on dequantized rows (linear_int4_ref); for tests.
void moe_experts_int4_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                          const MoeExpertsInt4& experts, float* out);

}  // namespace moeserve::kernels::cpu
