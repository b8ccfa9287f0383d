// What the API server does when one of the rank processes it started exits while it serves.
//   - Self-healing (Deployment::self_healing, docs/parallelism.md): the rank is started again with
//     --rejoin and every engine of its group is recovering until its group has re-formed: the dead
//     engine's requests fail (they were in the dead process), the survivors fail their running
//     requests and keep their waiting ones. A rank that dies more than --max-rank-restarts times
//     in a row (before its group serves again) is not restarted: the group is given up, its ranks
//     stopped, and /health says why.
//   - Otherwise: in lock-step (EP across the DP groups) one missing rank stops them all, so every
//     engine's requests fail; else only its own DP group's engine is lost and the others serve on.
#pragma once

#include <atomic>
#include <string>

#include "moeserve/cli/rank_restarts.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/cli/serve_processes.h"
#include "moeserve/core/log.h"
#include "moeserve/serve/engine_client.h"
#include "moeserve/serve/metrics.h"

namespace moeserve::cli {

class RankSupervisor {
public:
    // The engines the API server reaches are DP ranks [first_engine, first_engine + num_engines).
    RankSupervisor(const Deployment& d, int first_engine, int num_engines, RankProcesses& ranks,
                   serve::EngineClient& engines, serve::Metrics& metrics, Logger& logger);

    // The engines were ready once: from now on a dead rank is restarted (a rank that dies during
    // startup fails the start instead).
    void serving() { serving_ = true; }
    // The watcher thread's handler of a rank process that exited (not during shutdown).
    void on_exit(const RankProcesses::Rank& r);
    // Called periodically by the serving loop: once every engine is healthy, restart counts start
    // over.
    void check_health();

private:
    void restart(const RankProcesses::Rank& r, const std::string& reason);
    void give_up(const std::string& reason);

    const Deployment& d_;
    const int first_engine_, num_engines_;
    RankProcesses& ranks_;
    serve::EngineClient& engines_;
    serve::Metrics& metrics_;
    Logger& logger_;
    RankRestarts restarts_;
    std::atomic<bool> serving_{false};
};

}  // namespace moeserve::cli
