// EPLB (expert-parallel load balancing, vLLM's --enable-eplb / --eplb-config): what the model's
// balancer needs to know. The CLI parses the flags into it (cli/eplb_flags.h).
#pragma once

#include <cstdint>

namespace moeserve::model {

struct EplbConfig {
    bool enabled = false;
    // Forwards whose routed-token counts make up the load a placement is computed from.
    int64_t window_size = 1000;
    // A new placement is computed every step_interval forwards (every EP rank at the same one).
    int64_t step_interval = 3000;
    // Physical expert slots beyond one per logical expert, spread evenly over the EP ranks: a hot
    // expert may get copies on several ranks. (num_experts + num_redundant_experts) must be a
    // multiple of the EP size.
    int64_t num_redundant_experts = 0;
    // Log the balance (per-rank load, max/mean) at every placement decision.
    bool log_balancedness = false;
};

}  // namespace moeserve::model
