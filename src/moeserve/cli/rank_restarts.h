// When a dead rank is started again (self-healing groups, --max-rank-restarts): a rank may be
// restarted `limit` times in a row, the count starting over each time its group serves again; a
// rank that dies more often than that (a crash loop) is not restarted, and its group is given up.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace moeserve::cli {

class RankRestarts {
public:
    explicit RankRestarts(int limit) : limit_(limit) {}

    // Counts a restart of `rank` and returns true, or false when the group was given up or the
    // rank already had `limit` restarts in a row. Thread-safe.
    bool allow(int rank) {
        std::lock_guard lock(mutex_);
        if (given_up_) return false;
        int& n = in_a_row_[rank];
        if (n >= limit_) {
            given_up_ = true;
            return false;
        }
        ++n;
        return true;
    }
    // Restarts of `rank` since its group last served. Thread-safe.
    int in_a_row(int rank) const {
        std::lock_guard lock(mutex_);
        const auto it = in_a_row_.find(rank);
        return it == in_a_row_.end() ? 0 : it->second;
    }
    // The group serves again (every engine healthy): the counts start over. Thread-safe.
    void serving_again() {
        std::lock_guard lock(mutex_);
        in_a_row_.clear();
    }
    bool given_up() const {
        std::lock_guard lock(mutex_);
        return given_up_;
    }
    int limit() const { return limit_; }

private:
    const int limit_;
    mutable std::mutex mutex_;
    std::map<int, int> in_a_row_;
    bool given_up_ = false;
};

}  // namespace moeserve::cli
