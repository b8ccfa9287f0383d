// DeepSeek MoE routing: sigmoid or softmax scores, optional selection bias
// (e_score_correction_bias), group-limited top-k, weights from the unbiased scores.
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/kernels/routing_types.h"

namespace moeserve::kernels::cpu {

// Per-call buffers of grouped_topk, sized on first use and reused: the router runs once per MoE
// layer per step, so it allocates nothing after the first forward.
struct GroupedTopkScratch {
    std::vector<double> scores, choice, group;
    std::vector<char> taken, group_taken, keep;
};

// Per token: s = scoring(logits); choice = s + bias; with a group limit the topk_group best
// groups (lower id on ties) stay and every other expert's choice becomes 0.0 (as Hugging Face and
// DeepSeek mask it; not -inf); the k largest choices (lower id on ties) are chosen, in descending
// choice order; their weights are s of the chosen experts, renormalized and scaled as asked.
// logits f32 [num_tokens, num_experts]; topk_ids int32 / topk_weights f32 [num_tokens, k].
// Scores and comparisons in double.
void grouped_topk(const float* logits, int64_t num_tokens, const GroupedTopkArgs& args, int32_t* topk_ids,
                  float* topk_weights, GroupedTopkScratch& scratch);

}  // namespace moeserve::kernels::cpu
