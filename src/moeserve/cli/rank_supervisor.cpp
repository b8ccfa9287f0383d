// RankSupervisor (rank_supervisor.h).
#include "moeserve/cli/rank_supervisor.h"

#include <fmt/format.h>

namespace moeserve::cli {

namespace {
constexpr auto kHeadlessServingAgain = std::chrono::minutes(1);
}

RankSupervisor::RankSupervisor(const Deployment& d, int first_engine, int num_engines, RankProcesses& ranks,
                               EngineNotices& notices, Logger& logger)
    : d_(d),
      first_engine_(first_engine),
      num_engines_(num_engines),
      ranks_(ranks),
      notices_(&notices),
      logger_(logger),
      restarts_(d.max_rank_restarts) {}

RankSupervisor::RankSupervisor(const Deployment& d, RankProcesses& ranks, Logger& logger)
    : d_(d),
      first_engine_(0),
      num_engines_(0),
      ranks_(ranks),
      notices_(nullptr),
      logger_(logger),
      restarts_(d.max_rank_restarts) {}

void RankSupervisor::on_exit(const RankProcesses::Rank& r) {
    if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) {
        stopped_cleanly_ = true;  // told to stop
        return;
    }
    const int64_t died_ms = serve::EngineClient::steady_now_ms();
    const std::string reason = fmt::format("rank process {} (rank {}) {}", r.pid, r.rank, describe_status(r.status));
    MOESERVE_LOG_E(logger_, "api", "%s", reason.c_str());
    if (d_.self_healing() && serving_) {
        const int group = restart_group(r.rank);
        if (restarts_.given_up(group)) return;  // one of the ranks give_up() stopped
        if (restarts_.allow(r.rank, group)) return restart(r, reason, died_ms);
        return give_up(r, fmt::format("{}; it was restarted {} times in a row without its group serving again, so "
                                      "it is not restarted (--max-rank-restarts {})",
                                      reason, restarts_.limit(), restarts_.limit()));
    }
    lose(r, reason);
}

void RankSupervisor::lose(const RankProcesses::Rank& r, const std::string& reason) {
    const bool lockstep = parallel::dp_groups_step_together(d_.sizes);
    if (notices_ == nullptr) {  // a headless node: stop what cannot work without it
        ++failures_;
        MOESERVE_LOG_E(logger_, "api", "stopping %s", lockstep ? "this node's ranks" : "the ranks of its DP group");
        if (lockstep) {
            ranks_.kill_ranks();
        } else {
            ranks_.kill_group(r.rank / d_.sizes.tp, d_.sizes.tp);
        }
    } else if (lockstep) {
        for (int i = 0; i < num_engines_; ++i) notices_->dead(i, reason);
    } else {
        notices_->dead(r.rank / d_.sizes.tp - first_engine_, reason);
    }
}

void RankSupervisor::restart(const RankProcesses::Rank& r, const std::string& reason, int64_t died_ms) {
    last_restart_ = std::chrono::steady_clock::now().time_since_epoch().count();
    const std::string why = fmt::format("{}; restarting it ({} of at most {} in a row)", reason,
                                        restarts_.in_a_row(r.rank), restarts_.limit());
    if (notices_ != nullptr) {
        notices_->group_restarted();
        // Its group: every engine in lock-step, else its own DP group's (the others serve on).
        const int group_engine = r.rank / d_.sizes.tp - first_engine_;
        const bool lockstep = parallel::dp_groups_step_together(d_.sizes);
        const int dead_engine = r.rank % d_.sizes.tp == 0 ? group_engine : -1;
        for (int i = 0; i < num_engines_; ++i) {
            if (!lockstep && i != group_engine) continue;
            if (i == dead_engine) {
                notices_->restarting(i, why, died_ms);  // its requests were in the dead process
            } else {
                notices_->recovering(i, why, died_ms);
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
        if (notices_ != nullptr) {
            for (int i = 0; i < num_engines_; ++i) notices_->dead(i, reason);
        }
        ranks_.kill_ranks();
        return;
    }
    const int dp_rank = r.rank / d_.sizes.tp;  // independent DP groups: the others serve on
    if (notices_ != nullptr) notices_->dead(dp_rank - first_engine_, reason);
    ranks_.kill_group(dp_rank, d_.sizes.tp);
}

void RankSupervisor::check_health() {
    if (!serving_) return;
    if (const auto healthy = notices_ != nullptr ? notices_->all_healthy() : std::nullopt; healthy.has_value()) {
        if (*healthy) restarts_.serving_again();
        return;
    }
    const auto since =
        std::chrono::steady_clock::now().time_since_epoch() - std::chrono::steady_clock::duration(last_restart_.load());
    if (since > kHeadlessServingAgain) restarts_.serving_again();
}

}  // namespace moeserve::cli
