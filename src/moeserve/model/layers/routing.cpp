#include "moeserve/model/layers/routing.h"

#include "moeserve/kernels/ops.h"

namespace moeserve::model {

RoutingRule softmax_topk_rule(int64_t num_experts, int k, bool renormalize) {
    return
        [num_experts, k, renormalize](float* logits, int64_t num_tokens, const float*, int32_t* ids, float* weights) {
            kernels::ops().softmax_topk(logits, num_tokens, num_experts, k, renormalize, ids, weights);
        };
}

RoutingRule grouped_topk_rule(const GroupedRouter& r) {
    kernels::GroupedTopkArgs args{};
    args.num_experts = r.num_experts;
    args.k = r.k;
    args.scoring = r.scoring_func == "sigmoid" ? kernels::RouterScoring::kSigmoid : kernels::RouterScoring::kSoftmax;
    args.group_score = r.topk_method == "noaux_tc"               ? kernels::GroupScore::kTop2Sum
                       : r.topk_method == "group_limited_greedy" ? kernels::GroupScore::kMax
                                                                 : kernels::GroupScore::kNone;
    args.n_group = r.n_group;
    args.topk_group = r.topk_group;
    if (r.v2_gate) {
        args.renormalize = r.k > 1 && r.norm_topk_prob;
        args.scale = args.renormalize ? 1.0f : static_cast<float>(r.routed_scaling_factor);
    } else {
        args.renormalize = r.norm_topk_prob;
        args.scale = static_cast<float>(r.routed_scaling_factor);
    }
    return [args](float* logits, int64_t num_tokens, const float* bias, int32_t* ids, float* weights) {
        kernels::GroupedTopkArgs a = args;
        a.bias = bias;
        kernels::ops().grouped_topk(logits, num_tokens, a, ids, weights);
    };
}

}  // namespace moeserve::model
