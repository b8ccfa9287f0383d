#include "moeserve/core/thread_pool.h"

#include "moeserve/core/cpu_relax.h"
#include "moeserve/core/error.h"

namespace moeserve {

namespace {
// Pause loops before a waiting thread sleeps (worker) or yields (caller): a few microseconds.
// Measured on Zen5 with a busy neighbour process on the 2 vCPUs (docs/performance.md, "The
// thread pool beside a busy neighbour"): 20000 (~50-100 us) made 2-thread decode slower than
// 1 thread, the spinning thread taking the core the late one needed; 500 gave 2 threads
// 1.1-1.3x of 20000's rate there and the same rate on a quiet machine, within noise.
constexpr int kSpinIterations = 500;
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads), open_(static_cast<size_t>(num_threads)) {
    MOESERVE_CHECK(num_threads >= 1, "ThreadPool needs at least one thread, got {}", num_threads);
    workers_.reserve(static_cast<size_t>(num_threads - 1));
    for (int tid = 1; tid < num_threads; ++tid) workers_.emplace_back([this, tid] { worker_loop(tid); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::run_erased(TaskFn fn, void* ctx) {
    MOESERVE_CHECK(pending_.load(std::memory_order_relaxed) == 0, "ThreadPool::run is not re-entrant");
    task_fn_ = fn;
    task_ctx_ = ctx;
    pending_.store(num_threads_ - 1, std::memory_order_relaxed);
    for (int tid = 1; tid < num_threads_; ++tid) {
        open_[static_cast<size_t>(tid)].open.store(1, std::memory_order_release);
    }
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        wake_.notify_all();
    }
    fn(ctx, 0);
    // Shares no worker has claimed yet: run them here rather than wait for a worker to be scheduled.
    for (int tid = 1; tid < num_threads_; ++tid) {
        if (open_[static_cast<size_t>(tid)].open.exchange(0, std::memory_order_acq_rel) == 1) {
            fn(ctx, tid);
            pending_.fetch_sub(1, std::memory_order_acq_rel);
        }
    }
    int spins = 0;
    while (pending_.load(std::memory_order_acquire) != 0) {
        if (++spins < kSpinIterations) {
            cpu_relax();
        } else {
            std::this_thread::yield();
        }
    }
}

void ThreadPool::worker_loop(int tid) {
    uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        uint64_t gen;
        while ((gen = generation_.load(std::memory_order_acquire)) == seen && ++spins < kSpinIterations) {
            cpu_relax();
        }
        if (gen == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            sleeping_.fetch_add(1, std::memory_order_seq_cst);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
            sleeping_.fetch_sub(1, std::memory_order_relaxed);
            gen = generation_.load(std::memory_order_acquire);
        }
        seen = gen;
        if (stop_.load(std::memory_order_acquire)) return;
        // The claim orders the reads of task_fn_/task_ctx_ after the caller's writes of this run
        // (it may be a later run than `gen` if this worker was slow; that one is open too).
        if (open_[static_cast<size_t>(tid)].open.exchange(0, std::memory_order_acq_rel) != 1) continue;
        task_fn_(task_ctx_, tid);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace moeserve
