// What EPLB's balancer (expert_balancer.h) reports: the engine's stats carry it to the metrics.
#pragma once

#include <cstdint>
#include <vector>

namespace moeserve::model {

// What the balancer saw at its last decision, and what it moved (cumulative).
struct ExpertLoadStats {
    std::vector<int64_t> rank_load;  // [ep_size] tokens the rank's slots served in the window, all MoE layers
    double imbalance = 0;            // sum over layers of the busiest rank's load / of the mean; 0: no decision yet
    int64_t decisions = 0;           // placement decisions taken (every step_interval forwards)
    int64_t rebalances = 0;          // decisions that moved at least one layer, once its move completed
    int64_t moved_slots = 0;         // expert slots (all ranks) that changed expert
};

}  // namespace moeserve::model
