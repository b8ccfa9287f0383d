#include "moeserve/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace moeserve {
namespace {

TEST(ThreadPoolTest, RunCallsEveryThreadOnce) {
    for (int n : {1, 2, 3, 5}) {
        ThreadPool pool(n);
        for (int rep = 0; rep < 200; ++rep) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            pool.run([&](int tid) { hits[static_cast<size_t>(tid)].fetch_add(1); });
            for (auto& h : hits) ASSERT_EQ(h.load(), 1);
        }
    }
}

// Back-to-back runs with uneven work: workers are often late, so the caller runs their index
// itself; every index must still run exactly once per run, and no run may see another's task.
TEST(ThreadPoolTest, LateWorkersIndicesRunExactlyOnce) {
    for (int n : {2, 3}) {
        ThreadPool pool(n);
        std::vector<int> total(static_cast<size_t>(n), 0);
        for (int rep = 0; rep < 5000; ++rep) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            pool.run([&](int tid) {
                if (tid == 0 && rep % 7 == 0) {
                    volatile int spin = 0;
                    for (int i = 0; i < 2000; ++i) spin = spin + 1;
                }
                hits[static_cast<size_t>(tid)].fetch_add(1);
            });
            for (int t = 0; t < n; ++t) {
                ASSERT_EQ(hits[static_cast<size_t>(t)].load(), 1) << "rep " << rep << " tid " << t;
                total[static_cast<size_t>(t)]++;
            }
        }
        for (int t = 0; t < n; ++t) EXPECT_EQ(total[static_cast<size_t>(t)], 5000);
    }
}

TEST(ThreadPoolTest, ParallelForCoversRangeExactlyOnce) {
    ThreadPool pool(3);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1001}) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
            },
            4);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << n << " " << i;
    }
}

}  // namespace
}  // namespace moeserve
