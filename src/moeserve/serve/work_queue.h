// A few threads that run posted jobs in arrival order: the API server's CPU
// work (JSON parsing, chat-template rendering, tokenization) runs here, never
// on the I/O threads, so one large request cannot stall every other connection
// (and /health) behind it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moeserve::serve {

class WorkQueue {
public:
    explicit WorkQueue(int num_threads);
    // Runs the jobs already posted, then joins the threads.
    ~WorkQueue();
    WorkQueue(const WorkQueue&) = delete;
    WorkQueue& operator=(const WorkQueue&) = delete;

    // Thread-safe. job must not throw (an escaping exception is caught and dropped).
    void post(std::function<void()> job);

private:
    void run();

    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace moeserve::serve
