// ParallelConfig: this rank's place in the TP and EP groups, as the model layers need it (which
// heads, vocabulary rows and experts to load; which communicators to reduce over). Built from a
// parallel::ParallelContext by from_context(); the default is a single rank.
#pragma once

#include <algorithm>
#include <cstdint>

#include "moeserve/parallel/comm.h"
#include "moeserve/parallel/groups.h"

namespace moeserve::model {

struct ParallelConfig {
    int tp_rank = 0, tp_size = 1;
    int ep_rank = 0, ep_size = 1;
    parallel::Communicator* tp = nullptr;  // required when tp_size > 1; not owned
    parallel::Communicator* ep = nullptr;  // required when ep_size > 1; not owned
    // Debug only: this rank runs the other MoE exchange than the step asked for, so a test can
    // show that ranks which disagree fail in bounded time (Error kUnavailable), not hang.
    bool debug_flip_moe_exchange = false;

    bool is_single() const { return tp_size == 1 && ep_size == 1; }

    // The communicators of `ctx` (must outlive the model).
    static ParallelConfig from_context(parallel::ParallelContext& ctx) {
        ParallelConfig c;
        c.tp_rank = ctx.groups.tp_rank;
        c.tp_size = ctx.sizes.tp;
        c.ep_rank = ctx.groups.ep_rank;
        c.ep_size = ctx.sizes.ep;
        c.tp = ctx.tp.get();
        c.ep = ctx.ep.get();
        return c;
    }
};

// [begin, begin + count) of n items split into `parts` near-equal contiguous shards (the first
// n % parts shards get one more).
struct ShardRange {
    int64_t begin = 0, count = 0;
};
inline ShardRange shard_range(int64_t n, int parts, int index) {
    const int64_t base = n / parts, extra = n % parts;
    const int64_t begin = index * base + std::min<int64_t>(index, extra);
    return {begin, base + (index < extra ? 1 : 0)};
}

}  // namespace moeserve::model
