// The routing rules the architectures share (RoutingRule, layers/moe_block.h), so a family picks
// a rule and its config's values and copies no kernel call: softmax top-k (Qwen2/Qwen3-MoE,
// Mixtral) and DeepSeek's grouped top-k (DeepSeek-V2/V3, and GLM-4.5, whose router is V3's).
#pragma once

#include <cstdint>
#include <string>

#include "moeserve/model/layers/moe_block.h"

namespace moeserve::model {

// Softmax over all experts, the top k, renormalized to sum 1 when `renormalize`. The layer's
// score bias is not used.
RoutingRule softmax_topk_rule(int64_t num_experts, int k, bool renormalize);

// DeepSeek's router as its config.json names it.
struct GroupedRouter {
    int64_t num_experts = 0;               // n_routed_experts
    int k = 0;                             // num_experts_per_tok
    std::string scoring_func = "sigmoid";  // "sigmoid" | "softmax"
    std::string topk_method =
        "noaux_tc";  // "noaux_tc" (groups by their top-2 sum) | "group_limited_greedy" (by max) | "greedy"
    int64_t n_group = 1, topk_group = 1;
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.0;
    // DeepSeek-V2's MoEGate normalizes (k > 1 and norm_topk_prob) or scales, not both; V3's (and
    // GLM-4.5's) normalizes when asked, then always scales.
    bool v2_gate = false;
};

// Grouped top-k (the grouped_topk op, kernels/ops.h) of that router, with the layer's score bias
// (noaux_tc's e_score_correction_bias) when it has one. Each copy of the rule owns its buffers.
RoutingRule grouped_topk_rule(const GroupedRouter& router);

}  // namespace moeserve::model
