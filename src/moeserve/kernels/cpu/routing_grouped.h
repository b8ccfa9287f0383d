// DeepSeek MoE routing: sigmoid or softmax scores, optional selection bias
// (e_score_correction_bias), group-limited top-k, weights from the unbiased scores.
#pragma once

#include <cstdint>
#include <vector>

namespace moeserve::kernels::cpu {

enum class RouterScoring { kSigmoid, kSoftmax };
enum class GroupScore {
    kNone,     // no group limit: top-k over all experts ("greedy")
    kTop2Sum,  // group score = sum of its two largest choice scores (V3 "noaux_tc")
    kMax,      // group score = its largest choice score (V2 "group_limited_greedy")
};

struct GroupedTopkArgs {
    int64_t num_experts;
    int k;
    RouterScoring scoring;
    GroupScore group_score;
    int64_t n_group;     // num_experts % n_group == 0; contiguous groups of experts
    int64_t topk_group;  // groups kept
    const float* bias;   // [num_experts] added to the scores for selection only; null = none
    bool renormalize;    // weights /= (sum of the k weights + 1e-20)
    float scale;         // then weights *= scale (routed_scaling_factor, or 1)
};

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
