// LocalComm: every collective's numerics over threads; mismatched and missing ranks fail in
// bounded time with Error kUnavailable.
#include "moeserve/parallel/local_comm.h"

#include <gtest/gtest.h>

#include <chrono>

#include "moeserve/core/error.h"
#include "moeserve/parallel/groups.h"
#include "parallel/run_ranks.h"

namespace moeserve::parallel {
namespace {

using moeserve::testing::run_ranks;
using namespace std::chrono_literals;

void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
    for (size_t r = 0; r < errors.size(); ++r) {
        if (!errors[r]) continue;
        try {
            std::rethrow_exception(errors[r]);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "rank " << r << ": " << e.what();
        }
    }
}

ErrorCode code_of(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const Error& err) {
        return err.code();
    } catch (...) {
        return ErrorCode::kInternal;
    }
}

TEST(LocalCommTest, CollectivesOverThreeRanks) {
    constexpr int n = 3;
    LocalCommGroup group(n, 5000ms, "test");
    expect_no_errors(run_ranks(n, [&](int rank) {
        auto comm = group.communicator(rank);
        std::vector<float> f{1.0f * static_cast<float>(rank), 2.0f};
        comm->all_reduce_sum(std::span<float>(f));
        EXPECT_EQ(f, (std::vector<float>{3.0f, 6.0f}));
        std::vector<int64_t> m{rank, 10 - rank};
        comm->all_reduce_max(std::span<int64_t>(m));
        EXPECT_EQ(m, (std::vector<int64_t>{2, 10}));
        std::vector<int64_t> s{rank};
        comm->all_reduce_sum(std::span<int64_t>(s));
        EXPECT_EQ(s[0], 3);
        // all-gather fixed, all-gather-v (rank r gives r+1 copies of r)
        std::vector<int32_t> g(3);
        const int32_t mine = rank * 10;
        comm->all_gather<int32_t>(std::span<const int32_t>(&mine, 1), g);
        EXPECT_EQ(g, (std::vector<int32_t>{0, 10, 20}));
        std::vector<int32_t> in(static_cast<size_t>(rank + 1), rank), out(6);
        comm->all_gather_v<int32_t>(in, {1, 2, 3}, out);
        EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 1, 2, 2, 2}));
        // all-to-all-v: rank s sends value s*10+d to d, (d+1) times
        std::vector<int32_t> send;
        for (int d = 0; d < n; ++d) send.insert(send.end(), static_cast<size_t>(d + 1), rank * 10 + d);
        std::vector<int32_t> recv(static_cast<size_t>(n * (rank + 1)));
        const std::vector<int64_t> rc(n, rank + 1);
        comm->all_to_all_v<int32_t>(send, {1, 2, 3}, recv, rc);
        for (int s2 = 0; s2 < n; ++s2) {
            for (int j = 0; j <= rank; ++j) EXPECT_EQ(recv[static_cast<size_t>(s2 * (rank + 1) + j)], s2 * 10 + rank);
        }
        // reduce-scatter: rank r contributes (r+1) * (block index + 1)
        std::vector<float> rs(6), rs_out(2);
        for (int b = 0; b < n; ++b)
            rs[static_cast<size_t>(2 * b)] = rs[static_cast<size_t>(2 * b + 1)] =
                static_cast<float>((rank + 1) * (b + 1));
        comm->reduce_scatter_sum(rs, rs_out);
        EXPECT_EQ(rs_out,
                  (std::vector<float>{6.0f * static_cast<float>(rank + 1), 6.0f * static_cast<float>(rank + 1)}));
        std::vector<int32_t> bc{rank == 2 ? 7 : 0};
        comm->broadcast<int32_t>(bc, 2);
        EXPECT_EQ(bc[0], 7);
        comm->barrier();
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
