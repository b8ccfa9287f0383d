// LocalComm: every collective's numerics over threads; mismatched and missing ranks fail in
// bounded time with Error kUnavailable.
#include "moeserve/parallel/local_comm.h"

#include <gtest/gtest.h>

#include <chrono>

#include "moeserve/core/error.h"
#include "moeserve/parallel/groups.h"
#include "parallel/collective_checks.h"
#include "parallel/run_ranks.h"

namespace moeserve::parallel {
namespace {

using moeserve::testing::code_of;
using moeserve::testing::expect_every_collective;
using moeserve::testing::expect_no_errors;
using moeserve::testing::run_ranks;
using namespace std::chrono_literals;

TEST(LocalCommTest, CollectivesOverThreeRanks) {
    LocalCommGroup group(3, 5000ms, "test");
    expect_no_errors(run_ranks(3, [&](int rank) {
        auto comm = group.communicator(rank);
        expect_every_collective(*comm, rank);
    }));
}

TEST(LocalCommTest, MismatchedCollectivesFailOnEveryRank) {
    LocalCommGroup group(2, 5000ms, "test");
    auto errors = run_ranks(2, [&](int rank) {
        auto comm = group.communicator(rank);
        std::vector<float> f(4, 1.0f);
        if (rank == 0) {
            comm->all_reduce_sum(std::span<float>(f));
        } else {
            comm->barrier();
        }
    });
    ASSERT_TRUE(errors[0] && errors[1]);
    EXPECT_EQ(code_of(errors[0]), ErrorCode::kUnavailable);
    EXPECT_EQ(code_of(errors[1]), ErrorCode::kUnavailable);
}

TEST(LocalCommTest, MissingRankTimesOutAndBreaksTheGroup) {
    LocalCommGroup group(3, 200ms, "test");
    auto errors = run_ranks(3, [&](int rank) {
        auto comm = group.communicator(rank);
        if (rank == 2) return;  // never arrives
        comm->barrier();
    });
    EXPECT_EQ(code_of(errors[0]), ErrorCode::kUnavailable);
    EXPECT_EQ(code_of(errors[1]), ErrorCode::kUnavailable);
    EXPECT_FALSE(errors[2]);
    // Broken for good: a later call fails at once.
    auto c = group.communicator(0);
    EXPECT_THROW(c->barrier(), Error);
}

TEST(LocalCommTest, LocalWorldGroupsMatchTheLayout) {
    LocalWorld w = make_local_world({2, 2, 4}, 5000ms);
    ASSERT_EQ(w.ranks.size(), 4u);
    expect_no_errors(run_ranks(4, [&](int rank) {
        ParallelContext& c = w.ranks[static_cast<size_t>(rank)];
        EXPECT_EQ(c.tp->size(), 2);
        EXPECT_EQ(c.ep->size(), 4);
        EXPECT_EQ(c.ep->rank(), rank);
        std::vector<int64_t> v{rank};
        c.tp->all_reduce_sum(std::span<int64_t>(v));
        EXPECT_EQ(v[0], rank < 2 ? 1 : 5);
        std::vector<int64_t> d{rank};
        c.dp->all_reduce_sum(std::span<int64_t>(d));
        EXPECT_EQ(d[0], rank % 2 == 0 ? 2 : 4);
    }));
}

TEST(LocalCommTest, SingleRankCommunicatorCopies) {
    auto c = make_single_rank_communicator("solo");
    std::vector<float> f{1.5f};
    c->all_reduce_sum(std::span<float>(f));
    EXPECT_EQ(f[0], 1.5f);
    std::vector<float> in{1, 2}, out(2);
    c->reduce_scatter_sum(in, out);
    EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace moeserve::parallel
