// MoE routing: router logits -> top-k expert ids and weights per token.
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu {

// Qwen3-MoE / Mixtral: probs = softmax(logits) over all experts (f32), take the top k
// (ties broken by lower expert id, as torch.topk on CPU), renormalize the k weights to sum 1
// when `renormalize` (norm_topk_prob). logits f32 [num_tokens, num_experts];
// topk_ids int32 [num_tokens, k]; topk_weights f32 [num_tokens, k], ids in descending weight.
void softmax_topk(const float* logits, int64_t num_tokens, int64_t num_experts, int k, bool renormalize,
                  int32_t* topk_ids, float* topk_weights);

}  // namespace moeserve::kernels::cpu
