// Which routed expert each physical expert slot of an EP group holds, for one MoE layer.
//
// The EP group has ep_size ranks of slots_per_rank slots each; physical slot p lives on rank
// p / slots_per_rank. Without EPLB slot p holds expert p (placement = the plain EP shards). With
// redundant slots a hot expert can have copies on several ranks. Routing still picks logical
// experts; to_physical() only picks which copy serves each choice, so outputs do not depend on
// the placement (copies are loaded from the same checkpoint tensors).
//
// Every rank computes placements from the same all-reduced loads with the same code, so they agree
// without exchanging the placement itself.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moeserve::model {

class ExpertPlacement {
public:
    ExpertPlacement() = default;
    // Slot p holds expert p, then the redundant slots hold experts 0, 1, ... again. Error
    // kInvalidArgument unless ep_size divides num_experts + num_redundant.
    static ExpertPlacement initial(int64_t num_experts, int ep_size, int64_t num_redundant);

    // A placement that balances `load` (tokens routed to each expert, [num_experts]) over the
    // ranks: the redundant slots go to the experts with the most load per copy, then copies go,
    // heaviest first, to the least loaded rank with a free slot (a rank holds one copy of an
    // expert where it can). Slots whose expert stays on the same rank keep it, so only changed
    // slots need loading. Deterministic: the same inputs give the same placement on every rank.
    ExpertPlacement rebalanced(std::span<const int64_t> load) const;

    // Expected load of each rank when `load` is split evenly between each expert's copies.
    std::vector<double> rank_loads(std::span<const int64_t> load) const;
    // Slots of `rank` whose expert differs in `other` (same shape).
    int64_t changed_slots(const ExpertPlacement& other, int rank) const;

    // Rewrites ids [n] (logical experts) as physical slots, spreading each expert's choices in
    // turn over its copies (starting at `offset`, e.g. the EP rank, so ranks start on different
    // copies). `turns` is scratch.
    void to_physical(int32_t* ids, int64_t n, int64_t offset, std::vector<int32_t>& turns) const;

    int64_t num_experts() const { return static_cast<int64_t>(replica_begin_.size()) - 1; }
    int ep_size() const { return ep_size_; }
    int64_t slots_per_rank() const { return slots_per_rank_; }
    int64_t num_slots() const { return static_cast<int64_t>(slot_expert_.size()); }
    int32_t expert_of_slot(int64_t slot) const { return slot_expert_[static_cast<size_t>(slot)]; }
    // The physical slots holding `expert`, ascending.
    std::span<const int32_t> copies(int32_t expert) const {
        const auto b = static_cast<size_t>(replica_begin_[static_cast<size_t>(expert)]);
        const auto e = static_cast<size_t>(replica_begin_[static_cast<size_t>(expert) + 1]);
        return {replica_slots_.data() + b, e - b};
    }
    bool operator==(const ExpertPlacement& o) const { return slot_expert_ == o.slot_expert_; }

private:
    ExpertPlacement(std::vector<int32_t> slot_expert, int64_t num_experts, int ep_size);

    std::vector<int32_t> slot_expert_;    // [num_slots]: the expert each physical slot holds
    std::vector<int32_t> replica_begin_;  // [num_experts + 1]: expert e's copies in replica_slots_
    std::vector<int32_t> replica_slots_;  // [num_slots]: slots grouped by expert
    int ep_size_ = 1;
    int64_t slots_per_rank_ = 0;
};

// max / mean of per-rank loads (1 when there is no load): the step waits for the busiest rank.
double load_imbalance(std::span<const double> rank_loads);

}  // namespace moeserve::model
