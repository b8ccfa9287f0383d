// Checks shared by the in-process communicator tests: every collective's numerics over three
// ranks, and the error each rank ended with.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/parallel/comm.h"

namespace moeserve::testing {

inline void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
    for (size_t r = 0; r < errors.size(); ++r) {
        if (!errors[r]) continue;
        try {
            std::rethrow_exception(errors[r]);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "rank " << r << ": " << e.what();
        }
    }
}

inline moeserve::ErrorCode code_of(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const moeserve::Error& err) {
        return err.code();
    } catch (...) {
        return moeserve::ErrorCode::kInternal;
    }
}

// Every collective of `comm` (a group of three ranks) on deterministic data, checked against the
// sums, maxima and blocks the ranks must get. Every rank of the group runs it on its own thread.
inline void expect_every_collective(parallel::Communicator& comm, int rank) {
    constexpr int n = 3;
    ASSERT_EQ(comm.size(), n);
    std::vector<float> f{1.0f * static_cast<float>(rank), 2.0f};
    comm.all_reduce_sum(std::span<float>(f));
    EXPECT_EQ(f, (std::vector<float>{3.0f, 6.0f}));
    std::vector<int64_t> m{rank, 10 - rank};
    comm.all_reduce_max(std::span<int64_t>(m));
    EXPECT_EQ(m, (std::vector<int64_t>{2, 10}));
    std::vector<int64_t> s{rank};
    comm.all_reduce_sum(std::span<int64_t>(s));
    EXPECT_EQ(s[0], 3);
    // all-gather fixed, all-gather-v (rank r gives r+1 copies of r)
    std::vector<int32_t> g(3);
    const int32_t mine = rank * 10;
    comm.all_gather<int32_t>(std::span<const int32_t>(&mine, 1), g);
    EXPECT_EQ(g, (std::vector<int32_t>{0, 10, 20}));
    std::vector<int32_t> in(static_cast<size_t>(rank + 1), rank), out(6);
    comm.all_gather_v<int32_t>(in, {1, 2, 3}, out);
    EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 1, 2, 2, 2}));
    // all-to-all-v: rank s sends value s*10+d to d, (d+1) times
    std::vector<int32_t> send;
    for (int d = 0; d < n; ++d) send.insert(send.end(), static_cast<size_t>(d + 1), rank * 10 + d);
    std::vector<int32_t> recv(static_cast<size_t>(n * (rank + 1)));
    const std::vector<int64_t> rc(n, rank + 1);
    comm.all_to_all_v<int32_t>(send, {1, 2, 3}, recv, rc);
    for (int s2 = 0; s2 < n; ++s2) {
        for (int j = 0; j <= rank; ++j) EXPECT_EQ(recv[static_cast<size_t>(s2 * (rank + 1) + j)], s2 * 10 + rank);
    }
    // reduce-scatter: rank r contributes (r+1) * (block index + 1)
    std::vector<float> rs(6), rs_out(2);
    for (int b = 0; b < n; ++b)
        rs[static_cast<size_t>(2 * b)] = rs[static_cast<size_t>(2 * b + 1)] = static_cast<float>((rank + 1) * (b + 1));
    comm.reduce_scatter_sum(rs, rs_out);
    EXPECT_EQ(rs_out, (std::vector<float>{6.0f * static_cast<float>(rank + 1), 6.0f * static_cast<float>(rank + 1)}));
    std::vector<int32_t> bc{rank == 2 ? 7 : 0};
    comm.broadcast<int32_t>(bc, 2);
    EXPECT_EQ(bc[0], 7);
    comm.barrier();
}

}  // namespace moeserve::testing
