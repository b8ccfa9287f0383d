// A rank process's Gloo group, which re-forms after a failure (self-healing groups,
// docs/parallelism.md). Every rank of a formed group that sees a collective fail (a peer died,
// stalled or fell out of step) joins the group's next generation; the launcher starts a dead
// rank again with --rejoin, and the new process joins the generation after the one its
// predecessor last joined (the rendezvous store keeps it). The model, TP leader and DP
// coordinator keep their communicator pointers: the new generation's communicators go behind them
// (parallel/replaceable_comm.h).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/parallel/gloo_comm.h"
#include "moeserve/parallel/replaceable_comm.h"

namespace moeserve::cli {

class RankGroup {
public:
    // Connects (Error as connect_gloo). rejoin: this process replaces a dead rank; it connects in
    // join() instead, once its shard is loaded, so the survivors do not wait in a collective
    // (bounded by the collective timeout) while it loads.
    RankGroup(parallel::GlooConnectOptions options, bool rejoin, Logger& logger);
    // A rejoining rank's connection (Error as connect_gloo); nothing otherwise.
    void join();
    // Tells the rendezvous store this rank has joined and loaded its shard: a --headless launcher
    // restarts dead ranks only once all of its ranks have (ranks_loaded).
    void announce_loaded();

    parallel::ParallelContext& context() { return group_->context(); }
    int generation() const { return options_.generation; }

    // After a failed step: joins the next generation and puts it behind the same communicators.
    // Calls still_waiting() every `interval` meanwhile (the engine's heartbeat to the API
    // server). False, logged, when it cannot: the rendezvous failed (the store is gone, or the
    // others never came), or the group already failed kMaxRegroups times within a minute.
    bool regroup(const Error& failure, const std::function<void()>& still_waiting, std::chrono::milliseconds interval);

    static constexpr int kMaxRegroups = 5;

private:
    parallel::GlooConnectOptions options_;
    Logger& logger_;
    std::optional<parallel::RegroupableContext> group_;
    bool connected_ = false;
    std::deque<std::chrono::steady_clock::time_point> recent_;  // regroups within the last minute
};

// Whether every rank in `ranks` announced it had loaded (one connection to the store).
bool ranks_loaded(const std::string& store_host, int store_port, const std::vector<int>& ranks,
                  std::chrono::milliseconds timeout);

// How long a re-forming group waits for all its ranks: a replaced rank is a new process that
// loads its shard first. At least two minutes, and ten collective timeouts.
std::chrono::milliseconds regroup_arrival_timeout(std::chrono::milliseconds collective_timeout);

}  // namespace moeserve::cli
