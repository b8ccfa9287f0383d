// Parallel layout: a pure function from (dp, tp, ep) to the rank lists of the TP, DP and EP groups
// of every rank. No processes, no sockets: tested on its own. Depends on core only.
//
// world = dp * tp ranks; global rank = dp_rank * tp + tp_rank. Example dp=2, tp=2, ep=4:
//
//   rank | dp_rank tp_rank | TP group | DP group | EP group, ep_rank
//   -----+-----------------+----------+----------+------------------
//     0  |    0       0    |  [0, 1]  |  [0, 2]  |  [0 1 2 3], 0
//     1  |    0       1    |  [0, 1]  |  [1, 3]  |  [0 1 2 3], 1
//     2  |    1       0    |  [2, 3]  |  [0, 2]  |  [0 1 2 3], 2
//     3  |    1       1    |  [2, 3]  |  [1, 3]  |  [0 1 2 3], 3
//
//   TP group: the tp ranks of one DP group (attention heads, dense MLP, vocabulary split).
//   DP group: the ranks with the same tp_rank across DP groups; the tp_rank-0 DP group carries
//             the per-step control all-gather of the engine cores (parallel/dp_control.h).
//   EP group: ep consecutive ranks (ep divides world); experts are split across it. ep = world
//             is the usual --enable-expert-parallel; ep < world repeats expert shards
//             (dp=4, tp=1, ep=2: EP groups [0 1] and [2 3]); ep = 1 means no EP (experts are then
//             split TP-wise along moe_intermediate_size).
//
// LOCK-STEP RULE (docs/architecture.md "DP step protocol"): every rank of an EP group must issue the same
// sequence of collectives with the same kinds each step. An EP group spanning several DP groups
// therefore forces those DP groups to step together: each step starts with the DP control
// collective (dp_control.h), and a DP group without work runs a dummy batch that still takes part
// in every MoE exchange. A rank that skips a collective makes its peers time out (Error
// kUnavailable), never hang, because every Communicator call is bounded by its timeout.
#pragma once

#include <string>
#include <vector>

namespace moeserve::parallel {

struct ParallelSizes {
    int dp = 1;  // --data-parallel-size
    int tp = 1;  // --tensor-parallel-size
    int ep = 1;  // expert-parallel group size; must divide dp * tp

    int world() const { return dp * tp; }
};

// Defaults as the CLI applies them: ep = dp * tp when expert parallelism is enabled, else 1.
ParallelSizes make_sizes(int dp, int tp, bool enable_expert_parallel);

// Throws Error kInvalidArgument with a sentence when a size is < 1 or ep does not divide dp * tp.
void validate(const ParallelSizes& sizes);

// The LOCK-STEP RULE above as a predicate: true when an EP group spans several DP groups
// (ep > tp), so the DP engines must agree on every step. Without that (DP without EP) each DP
// group has every expert and no collective with the others: its engine steps on its own, and its
// failure is its own (the API server fails only that engine's requests).
bool dp_groups_step_together(const ParallelSizes& sizes);

// The groups one rank belongs to. Rank lists are global ranks, ascending.
struct RankGroups {
    int rank = 0;
    int dp_rank = 0, tp_rank = 0, ep_rank = 0;
    int ep_group_index = 0;  // which EP group (rank / ep)
    std::vector<int> tp_group, dp_group, ep_group;
};

// Pure. Requires validate(sizes) to pass and 0 <= rank < world.
RankGroups rank_groups(const ParallelSizes& sizes, int rank);

// "dp1 tp0" style tag for log lines.
std::string rank_tag(const RankGroups& groups);

}  // namespace moeserve::parallel
