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

TEST(ThreadPoolTest, ParallelForCoversRangeExactlyOnce) {
    ThreadPool pool(3);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1001}) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
        }, 4);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << n << " " << i;
    }
}

}  // namespace
}  // namespace moeserve
