// ExpertBalancer: EPLB for one EP rank's model. It counts the tokens routed to each expert of
// each MoE layer per forward (dummy batches left out), every step_interval forwards sums the last
// window_size forwards' counts over the EP group, computes each layer's balanced placement
// (expert_placement.h) and moves the layers whose balance it improves.
//
// A move never stalls a step for loading: a mover thread (below the engine's priority) loads this
// rank's new slots of one layer ahead from the checkpoint (the weights stay mapped), and at the
// start of each forward the ranks agree (one all-reduce of how many layers each has ready) on
// how many layers to switch. A layer switches on every rank at the start of the same forward,
// placement and weights together, so no step sees a half-moved expert; at most one layer's new
// slots are held beside the old ones.
//
// Every EP rank calls begin_forward() at the start of each forward (the same forwards: lock-step
// DP+EP runs dummy forwards), so its collectives line up like the MoE exchange's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/model/eplb/eplb_config.h"
#include "moeserve/model/eplb/expert_load_stats.h"
#include "moeserve/model/eplb/expert_placement.h"
#include "moeserve/model/layers/experts.h"
#include "moeserve/parallel/comm.h"

namespace moeserve::model {

class ExpertBalancer {
public:
    // Loads this rank's routed experts of MoE layer `moe_layer` under `placement` (on the mover
    // thread: must not touch what a forward uses).
    using LoadExperts = std::function<Experts(int64_t moe_layer, const ExpertPlacement& placement)>;
    // Switches MoE layer `moe_layer` to its new experts (none when this rank's slots did not change).
    using Install = std::function<void(int64_t moe_layer, std::optional<Experts> experts)>;

    // num_moe_layers layers, all starting at `initial`; logger may be null.
    ExpertBalancer(const EplbConfig& config, int ep_rank, int64_t num_moe_layers, const ExpertPlacement& initial,
                   LoadExperts load, Install install, Logger* logger);
    ~ExpertBalancer();
    ExpertBalancer(const ExpertBalancer&) = delete;
    ExpertBalancer& operator=(const ExpertBalancer&) = delete;

    // Collective over `ep` on some forwards (a decision, or a move in progress). counted: the
    // forward serves real tokens (not a dummy batch).
    void begin_forward(parallel::Communicator& ep, bool counted);
    // This forward's per-expert counts of MoE layer `moe_layer` ([num_experts]), or null when
    // the forward is not counted.
    int32_t* counts(int64_t moe_layer);
    const ExpertPlacement& placement(int64_t moe_layer) const { return placements_[static_cast<size_t>(moe_layer)]; }
    const ExpertLoadStats& stats() const { return stats_; }
    // After the EP group re-formed (a restarted rank starts from the initial placement): every
    // rank stops its move, goes back to the initial placement (reloading the layers it had moved)
    // and starts counting anew.
    void reset();

private:
    void decide(parallel::Communicator& ep);
    void advance_move(parallel::Communicator& ep);
    void start_mover();
    void stop_mover();
    void mover_loop();

    const EplbConfig config_;
    const int ep_rank_;
    const int64_t num_layers_, num_experts_;
    const ExpertPlacement initial_;
    LoadExperts load_;
    Install install_;
    Logger* logger_;

    std::vector<ExpertPlacement> placements_;  // [num_moe_layers], what forwards use now
    std::vector<int32_t> window_;              // [window_size][num_moe_layers][num_experts] counts
    int64_t forward_ = 0;
    bool counting_ = false;
    ExpertLoadStats stats_;

    // A move: pending_[i] = (MoE layer, its new placement), switched in order.
    std::vector<std::pair<int64_t, ExpertPlacement>> pending_;
    size_t switched_ = 0;
    int64_t move_slots_ = 0;  // slots the move changes, all ranks
    std::thread mover_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::vector<std::optional<Experts>> staged_;  // [pending_.size()], filled in order by the mover
    size_t staged_count_ = 0;                     // guarded by mutex_
    size_t mover_may_load_ = 0;                   // guarded by mutex_: switched_ as the mover sees it
    std::optional<Error> mover_error_;            // guarded by mutex_
    bool stop_ = false;                           // guarded by mutex_
};

}  // namespace moeserve::model
