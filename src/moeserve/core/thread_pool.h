// ThreadPool: a fixed team of threads for data-parallel kernels. The caller is thread 0 and
// takes part in every run, so ThreadPool(1) runs everything inline. Workers spin briefly
// between runs (decode issues many short parallel regions per token) and then sleep. A worker
// that has not picked up its share by the time the caller finished its own (descheduled on a
// busy machine, or still waking) has that share run by the caller instead, so a run never
// waits on a thread that is not running.
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

    // Calls fn(thread_index) once for each thread_index in [0, num_threads()), concurrently on
    // the pool's threads, except that the caller runs the index of any worker that has not
    // started it yet (sequentially, after its own): fn must not wait for another index.
    // Returns when all calls have returned. Call from one thread at a time.
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
    // open_[tid].open = 1 while index tid of the current run is unclaimed; the caller or worker
    // tid claims it by exchanging in 0 (one cache line each).
    struct alignas(64) Slot {
        std::atomic<int> open{0};
    };
    std::vector<Slot> open_;
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
};

}  // namespace moeserve
