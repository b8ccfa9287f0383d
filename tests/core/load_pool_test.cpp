#include "moeserve/core/load_pool.h"

#include <gtest/gtest.h>

#include <thread>

namespace moeserve {
namespace {

TEST(LoadPoolTest, ScopesNestAndRestoreAndStayOnTheirThread) {
    EXPECT_EQ(load_pool().num_threads(), 1);  // no scope: the caller alone
    ThreadPool outer(2), inner(3);
    {
        const LoadPoolScope a(outer);
        EXPECT_EQ(&load_pool(), &outer);
        {
            const LoadPoolScope b(inner);
            EXPECT_EQ(&load_pool(), &inner);
        }
        EXPECT_EQ(&load_pool(), &outer);
        // another thread (a worker, another rank's loader) sees no scope
        ThreadPool* seen = &outer;
        std::thread([&] { seen = &load_pool(); }).join();
        EXPECT_NE(seen, &outer);
        EXPECT_EQ(seen->num_threads(), 1);
    }
    EXPECT_EQ(load_pool().num_threads(), 1);
}

}  // namespace
}  // namespace moeserve
