// When a dead rank is started again (self-healing groups, --max-rank-restarts): a rank may be
// restarted `limit` times in a row, the count starting over each time the deployment serves again;
// a rank that dies more often than that (a crash loop) is not restarted, and its group is given
// up: every rank in lock-step (group 0 for all), else its own DP group's.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>

namespace moeserve::cli {

class RankRestarts {
public:
    explicit RankRestarts(int limit) : limit_(limit) {}

    // Counts a restart of `rank` (of `group`) and returns true, or false when its group was given
    // up or the rank already had `limit` restarts in a row (the group is given up now). Thread-safe.
    bool allow(int rank, int group = 0) {
        std::lock_guard lock(mutex_);
        if (given_up_.count(group) > 0) return false;
        int& n = in_a_row_[rank];
        if (n >= limit_) {
            given_up_.insert(group);
            return false;
        }
        ++n;
        return true;
    }
    // Restarts of `rank` since the deployment last served. Thread-safe.
    int in_a_row(int rank) const {
        std::lock_guard lock(mutex_);
        const auto it = in_a_row_.find(rank);
        return it == in_a_row_.end() ? 0 : it->second;
    }
    // The deployment serves again (every engine healthy): the counts start over. Thread-safe.
    void serving_again() {
        std::lock_guard lock(mutex_);
        in_a_row_.clear();
    }
    bool given_up(int group = 0) const {
        std::lock_guard lock(mutex_);
        return given_up_.count(group) > 0;
    }
    int limit() const { return limit_; }

private:
    const int limit_;
    mutable std::mutex mutex_;
    std::map<int, int> in_a_row_;
    std::set<int> given_up_;
};

}  // namespace moeserve::cli
