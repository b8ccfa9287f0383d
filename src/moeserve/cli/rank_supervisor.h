// What a launcher does when one of the rank processes it started exits: the API server (or the
// parent of --api-server-count N) for its local ranks, a --headless process for its node's ranks.
//   - Self-healing (Deployment::self_healing, docs/parallelism.md): the rank is started again with
//     --rejoin. On the API server every engine of its group (all in lock-step, else its DP
//     group's) is recovering until its group has re-formed: the dead engine's requests that had
//     started fail (they were in the dead process), the others go to an engine again; the
//     survivors fail their running requests and keep their waiting ones. A rank that dies more
//     than --max-rank-restarts times in a row (before the deployment serves again) is not
//     restarted: the group is given up, its ranks stopped, and /health says why.
//   - Otherwise, on the API server: in lock-step (EP across the DP groups) one missing rank stops
//     them all, so every engine's requests fail; else only its own DP group's engine is lost and
//     the others serve on. On a --headless node: the node's ranks (lock-step) or the dead rank's
//     DP group are stopped.
// A rank that exits with status 0 was told to stop (the deployment shuts down): nothing to do.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "moeserve/cli/engine_notices.h"
#include "moeserve/cli/rank_restarts.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/cli/serve_processes.h"
#include "moeserve/core/log.h"

namespace moeserve::cli {

class RankSupervisor {
public:
    // The API server, or the parent of several: its engines are DP ranks [first_engine,
    // first_engine + num_engines), and `notices` tells the API server(s) their fate.
    RankSupervisor(const Deployment& d, int first_engine, int num_engines, RankProcesses& ranks, EngineNotices& notices,
                   Logger& logger);
    // A --headless node: no engines of its own to tell.
    RankSupervisor(const Deployment& d, RankProcesses& ranks, Logger& logger);

    // The group served once (every rank connected and loaded): from now on a dead rank is
    // restarted (a rank that dies during startup fails the start instead).
    void serving() { serving_ = true; }
    bool is_serving() const { return serving_; }
    // The watcher thread's handler of a rank process that exited (not during shutdown).
    void on_exit(const RankProcesses::Rank& r);
    // Called periodically by the launcher's loop: restart counts start over once the group
    // serves again (the API server: every engine healthy; a launcher that cannot see that: a
    // minute without a restart).
    void check_health();
    // A headless node's loop ends once its ranks have exited and none is restarted: they were
    // told to stop, failed without self-healing, or the group was given up.
    bool done() const { return stopped_cleanly_ || failures_ > 0; }
    int failures() const { return failures_; }

private:
    void restart(const RankProcesses::Rank& r, const std::string& reason, int64_t died_ms);
    // Its group: 0 for every rank in lock-step, else its DP rank.
    int restart_group(int rank) const;
    void give_up(const RankProcesses::Rank& r, const std::string& reason);
    void lose(const RankProcesses::Rank& r, const std::string& reason);

    const Deployment& d_;
    const int first_engine_, num_engines_;
    RankProcesses& ranks_;
    EngineNotices* notices_;  // null on a headless node
    Logger& logger_;
    RankRestarts restarts_;
    std::atomic<bool> serving_{false}, stopped_cleanly_{false};
    std::atomic<int> failures_{0};
    std::atomic<std::chrono::steady_clock::rep> last_restart_{0};
};

}  // namespace moeserve::cli
