// ThreadPool: a fixed team of threads for data-parallel kernels. The caller is thread 0 and
// takes part in every run, so ThreadPool(1) runs everything inline. Workers spin briefly
// between runs (decode issues many short parallel regions per token) and then sleep.
// One pool per rank; not re-entrant: a task must not call run() on the same pool.
// Depends on std only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace moeserve {

class ThreadPool {
public:
    // num_threads >= 1, including the calling thread.
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return num_threads_; }

    // Calls fn(thread_index) once on each of the num_threads() threads; returns when all return.
    // Call from one thread at a time (the rank's compute thread).
    template <typename F>
    void run(F&& fn) {
        if (num_threads_ == 1) {
            fn(0);
            return;
        }
        run_erased([](void* ctx, int tid) { (*static_cast<F*>(ctx))(tid); }, &fn);
    }

    // Splits [0, n) into num_threads() contiguous chunks (some may be empty) and calls
    // fn(begin, end) for each non-empty one. `grain` rounds chunk sizes up to a multiple.
    template <typename F>
    void parallel_for(int64_t n, F&& fn, int64_t grain = 1) {
        if (n <= 0) return;
        const int64_t t = num_threads_;
        int64_t chunk = (n + t - 1) / t;
        chunk = (chunk + grain - 1) / grain * grain;
        if (t == 1 || chunk >= n) {
            fn(int64_t{0}, n);
            return;
        }
        run([&](int tid) {
            const int64_t begin = tid * chunk;
            const int64_t end = begin + chunk < n ? begin + chunk : n;
            if (begin < end) fn(begin, end);
        });
    }

private:
    using TaskFn = void (*)(void*, int);
    void run_erased(TaskFn fn, void* ctx);
    void worker_loop(int tid);

    int num_threads_;
    std::vector<std::thread> workers_;

    // The current task, published by bumping generation_.
    TaskFn task_fn_ = nullptr;
    void* task_ctx_ = nullptr;
    alignas(64) std::atomic<uint64_t> generation_{0};
    alignas(64) std::atomic<int> pending_{0};
    alignas(64) std::atomic<int> sleeping_{0};
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
};

}  // namespace moeserve
