// Rank layout arithmetic (see layout.h for the table).
#include "moeserve/parallel/layout.h"

#include <fmt/format.h>

#include "moeserve/core/error.h"

namespace moeserve::parallel {

ParallelSizes make_sizes(int dp, int tp, bool enable_expert_parallel) {
    ParallelSizes s{dp, tp, 1};
    if (enable_expert_parallel) s.ep = dp * tp;
    return s;
}

void validate(const ParallelSizes& s) {
    if (s.dp < 1 || s.tp < 1 || s.ep < 1) {
        raise(ErrorCode::kInvalidArgument,
              "parallel sizes must be >= 1; got data-parallel-size {}, tensor-parallel-size {}, expert-parallel "
              "size {}",
              s.dp, s.tp, s.ep);
    }
    if (s.world() % s.ep != 0) {
        raise(ErrorCode::kInvalidArgument,
              "the expert-parallel size must divide data-parallel-size * tensor-parallel-size; got ep {} for "
              "{} x {} = {} ranks",
              s.ep, s.dp, s.tp, s.world());
    }
}

RankGroups rank_groups(const ParallelSizes& s, int rank) {
    MOESERVE_CHECK(rank >= 0 && rank < s.world(), "rank {} outside [0, {})", rank, s.world());
    MOESERVE_CHECK(s.ep >= 1 && s.world() % s.ep == 0, "ep {} does not divide world {}", s.ep, s.world());
    RankGroups g;
    g.rank = rank;
    g.dp_rank = rank / s.tp;
    g.tp_rank = rank % s.tp;
    g.ep_group_index = rank / s.ep;
    g.ep_rank = rank % s.ep;
    for (int i = 0; i < s.tp; ++i) g.tp_group.push_back(g.dp_rank * s.tp + i);
    for (int d = 0; d < s.dp; ++d) g.dp_group.push_back(d * s.tp + g.tp_rank);
    for (int i = 0; i < s.ep; ++i) g.ep_group.push_back(g.ep_group_index * s.ep + i);
    return g;
}

bool dp_groups_step_together(const ParallelSizes& s) { return s.dp > 1 && s.ep > s.tp; }

std::string rank_tag(const RankGroups& g) { return fmt::format("dp{} tp{}", g.dp_rank, g.tp_rank); }

}  // namespace moeserve::parallel
