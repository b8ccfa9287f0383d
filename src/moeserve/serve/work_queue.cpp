#include "moeserve/serve/work_queue.h"

#include <algorithm>

namespace moeserve::serve {

WorkQueue::WorkQueue(int num_threads) {
    for (int i = 0; i < std::max(1, num_threads); ++i) threads_.emplace_back([this] { run(); });
}

WorkQueue::~WorkQueue() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void WorkQueue::post(std::function<void()> job) {
    {
        std::lock_guard lock(mutex_);
        jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
}

void WorkQueue::run() {
    while (true) {
        std::function<void()> job;
        {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // stopping, and nothing left
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        try {
            job();
        } catch (...) {  // the contract says jobs do not throw; never let one end
                         // the process
        }
    }
}

}  // namespace moeserve::serve
