// ParallelContext: what one rank holds of the parallel layout: its groups and a Communicator per
// group (TP, DP, EP). Built by connect_gloo() (processes) or make_local_world() (threads, tests).
// No globals: the context is an object passed down (docs/conventions.md 6).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "moeserve/parallel/comm.h"
#include "moeserve/parallel/layout.h"
#include "moeserve/parallel/local_comm.h"

namespace moeserve::parallel {

struct ParallelContext {
    ParallelSizes sizes;
    RankGroups groups;
    std::unique_ptr<Communicator> tp;  // size sizes.tp
    std::unique_ptr<Communicator> dp;  // size sizes.dp (same tp_rank across DP groups)
    std::unique_ptr<Communicator> ep;  // size sizes.ep
    std::shared_ptr<void> resources;   // transport/store the communicators use (Gloo); may be null
};

// Every rank's context of one layout, over in-process LocalCommGroups (one thread per rank must
// then drive ranks[r]). The groups must outlive the contexts; both live in this struct.
struct LocalWorld {
    std::vector<std::unique_ptr<LocalCommGroup>> comm_groups;
    std::vector<ParallelContext> ranks;  // [world]
};
LocalWorld make_local_world(const ParallelSizes& sizes, std::chrono::milliseconds timeout);

// A communicator of one rank (no peers): every collective is a copy. Used for groups of size 1.
std::unique_ptr<Communicator> make_single_rank_communicator(const std::string& name);

}  // namespace moeserve::parallel
