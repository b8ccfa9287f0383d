// LocalComm: a Communicator over threads of one process (N ranks = N threads sharing a
// LocalCommGroup), so TP/EP numerics and the step protocol can be unit-tested without processes.
// It checks that all ranks call the same collective with matching sizes (a mismatch is an Error,
// as a desynchronized step must be), and bounds every wait by the group's timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "moeserve/parallel/comm.h"

namespace moeserve::parallel {

// Shared state of one group. Thread-safe; must outlive its communicators.
class LocalCommGroup {
public:
    LocalCommGroup(int size, std::chrono::milliseconds timeout, std::string name = "local");
    // The communicator of `rank`; each rank's communicator is used by exactly one thread.
    std::unique_ptr<Communicator> communicator(int rank);
    int size() const { return size_; }

private:
    friend class LocalComm;
    struct Slot {
        std::string op;               // operation and its sizes; must agree across ranks
        std::vector<std::byte> data;  // a copy of the rank's input
        std::vector<size_t> counts;   // per-rank byte counts (all_to_all_v send sizes)
    };
    // Waits until every rank arrived (or throws kUnavailable on timeout / broken group).
    void arrive_and_wait(int rank, const std::string& op);
    [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, const std::string& reason);

    const int size_;
    const std::chrono::milliseconds timeout_;
    const std::string name_;
    std::mutex mu_;
    std::condition_variable cv_;
    int arrived_ = 0;
    uint64_t generation_ = 0;
    bool broken_ = false;
    std::string broken_reason_;
    std::vector<Slot> slots_;
};

}  // namespace moeserve::parallel
