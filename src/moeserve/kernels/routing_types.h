// The arguments of grouped top-k routing (DeepSeek's scoring, selection bias and group limit),
// as every backend receives them. Depends on std only.
#pragma once

#include <cstdint>

namespace moeserve::kernels {

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

}  // namespace moeserve::kernels
