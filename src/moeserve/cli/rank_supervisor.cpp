// RankSupervisor (rank_supervisor.h).
#include "moeserve/cli/rank_supervisor.h"

#include <fmt/format.h>

namespace moeserve::cli {

namespace {
constexpr auto kHeadlessServingAgain = std::chrono::minutes(1);
}

RankSupervisor::RankSupervisor(const Deployment& d, int first_engine, int num_engines, RankProcesses& ranks,
                               serve::EngineClient& engines, serve::Metrics& metrics, Logger& logger)
    : d_(d),
      first_engine_(first_engine),
      num_engines_(num_engines),
      ranks_(ranks),
      engines_(&engines),
      metrics_(&metrics),
      logger_(logger),
      restarts_(d.max_rank_restarts) {}

RankSupervisor::RankSupervisor(const Deployment& d, RankProcesses& ranks, Logger& logger)
    : d_(d),
      first_engine_(0),
      num_engines_(0),
      ranks_(ranks),
      engines_(nullptr),
      metrics_(nullptr),
      logger_(logger),
      restarts_(d.max_rank_restarts) {}

void RankSupervisor::on_exit(const RankProcesses::Rank& r) {
    if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) {
        stopped_cleanly_ = true;  // told to stop
        return;
    }
    const std::string reason = fmt::format("rank process {} (rank {}) {}", r.pid, r.rank, describe_status(r.status));
    MOESERVE_LOG_E(logger_, "api", "%s", reason.c_str());
    if (d_.self_healing() && serving_) {
        const int group = restart_group(r.rank);
        if (restarts_.given_up(group)) return;  // one of the ranks give_up() stopped
        if (restarts_.allow(r.rank, group)) return restart(r, reason);
        return give_up(r, fmt::format("{}; it was restarted {} times in a row without its group serving again, so "
                                      "it is not restarted (--max-rank-restarts {})",
                                      reason, restarts_.limit(), restarts_.limit()));
    }
    lose(r, reason);
}

void RankSupervisor::lose(const RankProcesses::Rank& r, const std::string& reason) {
    const bool lockstep = parallel::dp_groups_step_together(d_.sizes);
    if (engines_ == nullptr) {  // a headless node: stop what cannot work without it
        ++failures_;
        MOESERVE_LOG_E(logger_, "api", "stopping %s", lockstep ? "this node's ranks" : "the ranks of its DP group");
        if (lockstep) {
            ranks_.kill_ranks();
        } else {
            ranks_.kill_group(r.rank / d_.sizes.tp, d_.sizes.tp);
        }
    } else if (lockstep) {
        for (int i = 0; i < num_engines_; ++i) engines_->mark_dead(i, reason);
    } else {
        engines_->mark_dead(r.rank / d_.sizes.tp - first_engine_, reason);
    }
}

void RankSupervisor::restart(const RankProcesses::Rank& r, const std::string& reason) {
    last_restart_ = std::chrono::steady_clock::now().time_since_epoch().count();
    const std::string why = fmt::format("{}; restarting it ({} of at most {} in a row)", reason,
                                        restarts_.in_a_row(r.rank), restarts_.limit());
    if (engines_ != nullptr) {
        metrics_->on_group_restart();
        // Its group: every engine in lock-step, else its own DP group's (the others serve on).
        const int group_engine = r.rank / d_.sizes.tp - first_engine_;
        const bool lockstep = parallel::dp_groups_step_together(d_.sizes);
        const int dead_engine = r.rank % d_.sizes.tp == 0 ? group_engine : -1;
        for (int i = 0; i < num_engines_; ++i) {
            if (!lockstep && i != group_engine) continue;
            if (i == dead_engine) {
                engines_->mark_restarting(i, why);  // its requests were in the dead process
            } else {
                engines_->mark_recovering(i, why);
            }
        }
    }
    const pid_t pid = ranks_.respawn(r.pid, "--rejoin");
    MOESERVE_LOG_W(logger_, "api", "%s: new process %d", why.c_str(), pid);
}

int RankSupervisor::restart_group(int rank) const {
    return parallel::dp_groups_step_together(d_.sizes) ? 0 : rank / d_.sizes.tp;
}

void RankSupervisor::give_up(const RankProcesses::Rank& r, const std::string& reason) {
    ++failures_;
    MOESERVE_LOG_E(logger_, "api", "%s; stopping its group", reason.c_str());
    if (parallel::dp_groups_step_together(d_.sizes)) {
        if (engines_ != nullptr) {
            for (int i = 0; i < num_engines_; ++i) engines_->mark_dead(i, reason);
        }
        ranks_.kill_ranks();
        return;
    }
    const int dp_rank = r.rank / d_.sizes.tp;  // independent DP groups: the others serve on
    if (engines_ != nullptr) engines_->mark_dead(dp_rank - first_engine_, reason);
    ranks_.kill_group(dp_rank, d_.sizes.tp);
}

void RankSupervisor::check_health() {
    if (!serving_) return;
    if (engines_ != nullptr) {
        if (engines_->healthy()) restarts_.serving_again();
        return;
    }
    const auto since =
        std::chrono::steady_clock::now().time_since_epoch() - std::chrono::steady_clock::duration(last_restart_.load());
    if (since > kHeadlessServingAgain) restarts_.serving_again();
}

}  // namespace moeserve::cli
