// Fused MoE experts: for each token t, out[t] = sum_j weight[t, j] * Expert_{id[t, j]}(x[t]),
// Expert_e(x) = down_e(silu(gate_e(x)) * up_e(x)). Tokens are grouped by expert so each expert's
// weights are read once per call (not once per token), and experts are spread over the threads.
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/weight_types.h"
#include "moeserve/kernels/cpu/gguf_linear.h"

namespace moeserve::kernels::cpu {

// Reusable per-call buffers (owned by the caller, grown on demand; no allocation in steady state).
// Extra buffers of the int8 path (moe_experts_int8.h), grown on demand.
struct MoeInt8Scratch {
    std::vector<int8_t> qx, qact;
    std::vector<float> sx, sact;
};

struct MoeScratch {
    std::vector<int32_t> offsets, token_index, slot_index;
    std::vector<float> gathered, gate_up, act, down_out;
    std::vector<float> pack;  // [threads, matmul_pack_floats()]: each thread's GEMM packing
    // bf16 weights under a rounding tile (matmul_tile.h matmul_rounds_x): gathered and act rounded
    // to bf16 once per call, rows padded to rounded_row_stride.
    std::vector<uint16_t> gathered_bf16, act_bf16;
    MoeInt8Scratch int8;  // int8 experts only: kept here so one scratch serves every layer of a model
    GgufScratch gguf;     // GGUF experts only (gguf_linear.h), likewise
};

// x f32 [num_tokens, hidden]; topk_ids int32 / topk_weights f32 [num_tokens, k];
// out f32 [num_tokens, hidden] is overwritten (zero where no local expert was chosen).
void moe_experts_bf16(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsBf16& experts, MoeScratch& scratch, float* out);

void moe_experts_f32(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                     const float* topk_weights, int k, const MoeExpertsF32& experts, MoeScratch& scratch, float* out);

// Token by token, expert by expert; for tests.
void moe_experts_bf16_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                          const MoeExpertsBf16& experts, float* out);
void moe_experts_f32_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                         const MoeExpertsF32& experts, float* out);

}  // namespace moeserve::kernels::cpu
