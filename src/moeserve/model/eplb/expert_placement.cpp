#include "moeserve/model/eplb/expert_placement.h"

#include <algorithm>
#include <numeric>

#include "moeserve/core/error.h"

namespace moeserve::model {

ExpertPlacement::ExpertPlacement(std::vector<int32_t> slot_expert, int64_t num_experts, int ep_size)
    : slot_expert_(std::move(slot_expert)),
      ep_size_(ep_size),
      slots_per_rank_(static_cast<int64_t>(slot_expert_.size()) / ep_size) {
    replica_begin_.assign(static_cast<size_t>(num_experts) + 1, 0);
    for (int32_t e : slot_expert_) ++replica_begin_[static_cast<size_t>(e) + 1];
    std::partial_sum(replica_begin_.begin(), replica_begin_.end(), replica_begin_.begin());
    replica_slots_.resize(slot_expert_.size());
    std::vector<int32_t> fill(replica_begin_.begin(), replica_begin_.end() - 1);
    for (size_t p = 0; p < slot_expert_.size(); ++p) {
        replica_slots_[static_cast<size_t>(fill[static_cast<size_t>(slot_expert_[p])]++)] = static_cast<int32_t>(p);
    }
}

ExpertPlacement ExpertPlacement::initial(int64_t num_experts, int ep_size, int64_t num_redundant) {
    const int64_t slots = num_experts + num_redundant;
    if (num_experts < 1 || ep_size < 1 || num_redundant < 0 || slots % ep_size != 0) {
        raise(ErrorCode::kInvalidArgument,
              "EPLB: the expert-parallel size ({}) must divide the number of experts ({}) plus "
              "num_redundant_experts ({})",
              ep_size, num_experts, num_redundant);
    }
    std::vector<int32_t> slot_expert(static_cast<size_t>(slots));
    for (int64_t p = 0; p < slots; ++p) slot_expert[static_cast<size_t>(p)] = static_cast<int32_t>(p % num_experts);
    return {std::move(slot_expert), num_experts, ep_size};
}

namespace {

// How many copies each expert gets: one each, then each redundant slot to the expert with the
// most load per copy (exact integer comparison; ties to the lower id). No expert gets more copies
// than there are ranks while another could take one.
std::vector<int64_t> copies_per_expert(std::span<const int64_t> load, int64_t num_slots, int ep_size) {
    const auto n = static_cast<int64_t>(load.size());
    std::vector<int64_t> copies(static_cast<size_t>(n), 1);
    for (int64_t extra = num_slots - n; extra > 0; --extra) {
        int64_t best = -1;
        for (int64_t e = 0; e < n; ++e) {
            const auto i = static_cast<size_t>(e);
            if (copies[i] >= ep_size) continue;
            const auto b = static_cast<size_t>(best);
            if (best < 0 || static_cast<__int128>(load[i]) * copies[b] > static_cast<__int128>(load[b]) * copies[i]) {
                best = e;
            }
        }
        if (best < 0) best = (num_slots - n - extra) % n;  // every expert on every rank: spread the rest
        ++copies[static_cast<size_t>(best)];
    }
    return copies;
}

struct Copy {
    int32_t expert;
    double weight;  // the expert's load per copy
};

// Each rank's experts (a multiset, [ep_size][slots_per_rank]): copies heaviest first, each to the
// least loaded rank with a free slot that does not hold the expert yet (if every free rank holds
// it, the least loaded free rank).
std::vector<std::vector<int32_t>> pack(std::vector<Copy> items, int ep_size, int64_t slots_per_rank) {
    std::stable_sort(items.begin(), items.end(), [](const Copy& a, const Copy& b) {
        return a.weight > b.weight || (a.weight == b.weight && a.expert < b.expert);
    });
    std::vector<std::vector<int32_t>> held(static_cast<size_t>(ep_size));
    std::vector<double> total(static_cast<size_t>(ep_size), 0.0);
    for (const Copy& c : items) {
        int best = -1;
        bool best_holds = true;
        for (int r = 0; r < ep_size; ++r) {
            const auto& h = held[static_cast<size_t>(r)];
            if (static_cast<int64_t>(h.size()) >= slots_per_rank) continue;
            const bool holds = std::find(h.begin(), h.end(), c.expert) != h.end();
            const bool better =
                best < 0 || (best_holds && !holds) ||
                (holds == best_holds && total[static_cast<size_t>(r)] < total[static_cast<size_t>(best)]);
            if (better) {
                best = r;
                best_holds = holds;
            }
        }
        held[static_cast<size_t>(best)].push_back(c.expert);
        total[static_cast<size_t>(best)] += c.weight;
    }
    return held;
}

}  // namespace

ExpertPlacement ExpertPlacement::rebalanced(std::span<const int64_t> load) const {
    MOESERVE_CHECK(static_cast<int64_t>(load.size()) == num_experts(), "EPLB: {} loads for {} experts", load.size(),
                   num_experts());
    const std::vector<int64_t> copies = copies_per_expert(load, num_slots(), ep_size_);
    std::vector<Copy> items;
    for (int64_t e = 0; e < num_experts(); ++e) {
        const auto i = static_cast<size_t>(e);
        for (int64_t c = 0; c < copies[i]; ++c) {
            items.push_back({static_cast<int32_t>(e), static_cast<double>(load[i]) / static_cast<double>(copies[i])});
        }
    }
    const std::vector<std::vector<int32_t>> held = pack(std::move(items), ep_size_, slots_per_rank_);
    // Slots keep their expert where the rank still holds it; the rest take the new ones in order.
    std::vector<int32_t> slot_expert(slot_expert_.size(), -1);
    for (int r = 0; r < ep_size_; ++r) {
        std::vector<int32_t> todo = held[static_cast<size_t>(r)];
        std::sort(todo.begin(), todo.end());
        const int64_t first = r * slots_per_rank_;
        for (int64_t p = first; p < first + slots_per_rank_; ++p) {
            auto it = std::find(todo.begin(), todo.end(), slot_expert_[static_cast<size_t>(p)]);
            if (it == todo.end()) continue;
            slot_expert[static_cast<size_t>(p)] = *it;
            todo.erase(it);
        }
        auto next = todo.begin();
        for (int64_t p = first; p < first + slots_per_rank_; ++p) {
            if (slot_expert[static_cast<size_t>(p)] < 0) slot_expert[static_cast<size_t>(p)] = *next++;
        }
    }
    return {std::move(slot_expert), num_experts(), ep_size_};
}

std::vector<double> ExpertPlacement::rank_loads(std::span<const int64_t> load) const {
    std::vector<double> out(static_cast<size_t>(ep_size_), 0.0);
    for (int64_t p = 0; p < num_slots(); ++p) {
        const int32_t e = expert_of_slot(p);
        out[static_cast<size_t>(p / slots_per_rank_)] +=
            static_cast<double>(load[static_cast<size_t>(e)]) / static_cast<double>(copies(e).size());
    }
    return out;
}

int64_t ExpertPlacement::changed_slots(const ExpertPlacement& other, int rank) const {
    int64_t n = 0;
    for (int64_t p = rank * slots_per_rank_; p < (rank + 1) * slots_per_rank_; ++p) {
        n += expert_of_slot(p) != other.expert_of_slot(p) ? 1 : 0;
    }
    return n;
}

void ExpertPlacement::to_physical(int32_t* ids, int64_t n, int64_t offset, std::vector<int32_t>& turns) const {
    turns.assign(static_cast<size_t>(num_experts()), 0);
    for (int64_t i = 0; i < n; ++i) {
        const int32_t e = ids[i];
        const std::span<const int32_t> c = copies(e);
        const auto turn = static_cast<size_t>(turns[static_cast<size_t>(e)]++ + offset);
        ids[i] = c[c.size() == 1 ? 0 : turn % c.size()];
    }
}

double load_imbalance(std::span<const double> rank_loads) {
    if (rank_loads.empty()) return 1.0;
    const double sum = std::accumulate(rank_loads.begin(), rank_loads.end(), 0.0);
    if (sum <= 0.0) return 1.0;
    return *std::max_element(rank_loads.begin(), rank_loads.end()) / (sum / static_cast<double>(rank_loads.size()));
}

}  // namespace moeserve::model
