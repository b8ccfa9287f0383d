// RankGroup (rank_group.h).
#include "moeserve/cli/rank_group.h"

#include <future>

#include "moeserve/parallel/rendezvous.h"

namespace moeserve::cli {

std::chrono::milliseconds regroup_arrival_timeout(std::chrono::milliseconds collective_timeout) {
    return std::max(std::chrono::milliseconds(120000), 10 * collective_timeout);
}

RankGroup::RankGroup(parallel::GlooConnectOptions options, bool rejoin, Logger& logger)
    : options_(std::move(options)), logger_(logger) {
    if (rejoin) {
        const int last =
            parallel::last_generation(options_.store_host, options_.store_port, options_.rank, options_.timeout);
        options_.generation = last + 1;
        options_.arrival_timeout = regroup_arrival_timeout(options_.timeout);
        MOESERVE_LOG_I(logger_, "engine", "rank %d: replacing a dead rank; will join the group's generation %d",
                       options_.rank, options_.generation);
        group_.emplace(options_.sizes, options_.rank, options_.timeout);
        return;
    }
    group_.emplace(parallel::connect_gloo(options_));
    connected_ = true;
}

void RankGroup::join() {
    if (connected_) return;
    group_->regroup(parallel::connect_gloo(options_));
    connected_ = true;
    MOESERVE_LOG_I(logger_, "engine", "rank %d: joined the group (generation %d)", options_.rank, options_.generation);
}

namespace {
std::string loaded_key(int rank) { return "loaded/" + std::to_string(rank); }
}  // namespace

void RankGroup::announce_loaded() {
    parallel::TcpStore store(options_.store_host, options_.store_port, options_.timeout);
    const std::string generation = std::to_string(options_.generation);
    store.set(loaded_key(options_.rank), std::vector<char>(generation.begin(), generation.end()));
}

bool ranks_loaded(const std::string& store_host, int store_port, const std::vector<int>& ranks,
                  std::chrono::milliseconds timeout) {
    parallel::TcpStore store(store_host, store_port, timeout);
    std::vector<char> value;
    for (const int r : ranks) {
        if (!store.try_get(loaded_key(r), value)) return false;
    }
    return true;
}

bool RankGroup::regroup(const Error& failure, const std::function<void()>& still_waiting,
                        std::chrono::milliseconds interval) {
    const auto now = std::chrono::steady_clock::now();
    while (!recent_.empty() && now - recent_.front() > std::chrono::minutes(1)) recent_.pop_front();
    if (static_cast<int>(recent_.size()) >= kMaxRegroups) {
        MOESERVE_LOG_E(logger_, "engine", "rank %d: the group failed %d times within a minute; giving up: %s",
                       options_.rank, kMaxRegroups + 1, failure.what());
        return false;
    }
    recent_.push_back(now);
    ++options_.generation;
    options_.arrival_timeout = regroup_arrival_timeout(options_.timeout);
    MOESERVE_LOG_W(logger_, "engine", "rank %d: re-forming the group (generation %d) after: %s", options_.rank,
                   options_.generation, failure.what());
    group_->disconnect();  // peers still waiting in a collective with this rank fail now
    // The rendezvous blocks; the engine thread keeps the API server informed meanwhile.
    auto next = std::async(std::launch::async, [o = options_] { return parallel::connect_gloo(o); });
    while (next.wait_for(interval) != std::future_status::ready) {
        if (still_waiting) still_waiting();
    }
    try {
        group_->regroup(next.get());
    } catch (const Error& e) {
        MOESERVE_LOG_E(logger_, "engine", "rank %d: the group did not re-form: %s", options_.rank, e.what());
        return false;
    }
    MOESERVE_LOG_I(logger_, "engine", "rank %d: the group re-formed (generation %d)", options_.rank,
                   options_.generation);
    return true;
}

}  // namespace moeserve::cli
