// The desync guard over LocalComm threads: every collective gives the unguarded result; ranks out
// of step fail at once on every rank that can see it, naming both sides; sizes that do not line
// up name where this rank was. (Across processes: gloo_comm_test's SkippedCollective test.)
#include "moeserve/parallel/guarded_comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "moeserve/core/error.h"
#include "moeserve/parallel/local_comm.h"
#include "parallel/collective_checks.h"
#include "parallel/run_ranks.h"

namespace moeserve::parallel {
namespace {

using moeserve::testing::code_of;
using moeserve::testing::expect_every_collective;
using moeserve::testing::expect_no_errors;
using moeserve::testing::run_ranks;
using namespace std::chrono_literals;

std::string message_of(const std::exception_ptr& e) {
    if (!e) return "";
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& err) {
        return err.what();
    }
}

TEST(GuardedCommTest, EveryCollectiveGivesTheUnguardedResult) {
    LocalCommGroup group(3, 5000ms, "test");
    expect_no_errors(run_ranks(3, [&](int rank) {
        auto comm = make_guarded_communicator(group.communicator(rank));
        for (int step = 0; step < 3; ++step) {
            comm->begin_step();
            expect_every_collective(*comm, rank);
        }
    }));
}

// Empty contributions (a rank with no rows, a zero-byte broadcast): their spans may be null, and the
// tags still travel (UBSan found a null memcpy here once, through the Gloo rank helper).
TEST(GuardedCommTest, EmptyBlocksCarryTheirTags) {
    LocalCommGroup group(2, 5000ms, "test");
    expect_no_errors(run_ranks(2, [&](int rank) {
        auto comm = make_guarded_communicator(group.communicator(rank));
        std::vector<int32_t> out(1, -1);
        const std::vector<int32_t> one(rank == 1 ? 1 : 0, 5);
        comm->all_gather_v<int32_t>(std::span<const int32_t>(one.data(), one.size()), {0, 1}, out);
        EXPECT_EQ(out[0], 5);
        comm->all_gather_bytes({}, {});
        comm->broadcast_bytes({}, 0);
        comm->all_to_all_v_bytes({}, {0, 0}, {}, {0, 0});
        std::vector<float> none;
        comm->all_reduce_sum(std::span<float>(none));
    }));
}

// Rank 1 leaves out the second all-reduce of step 2: every step's all-reduces have one size, so
// the inner collectives still line up, and step 3's first collective meets rank 0's last of step 2.
TEST(GuardedCommTest, ASkippedCollectiveFailsEveryRankAtTheNextStepNamingBoth) {
    LocalCommGroup group(2, 60000ms, "test");
    std::vector<std::unique_ptr<Communicator>> comms;
    comms.push_back(make_guarded_communicator(group.communicator(0)));
    comms.push_back(make_guarded_communicator(group.communicator(1), {.step = 2, .index = 1}));
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = run_ranks(2, [&](int rank) {
        std::vector<float> v(16, 1.0f);
        for (int step = 1; step <= 5; ++step) {
            comms[static_cast<size_t>(rank)]->begin_step();
            for (int i = 0; i < 3; ++i) comms[static_cast<size_t>(rank)]->all_reduce_sum(std::span<float>(v));
        }
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int r = 0; r < 2; ++r) {
        const std::string what = message_of(errors[static_cast<size_t>(r)]);
        ASSERT_FALSE(what.empty()) << "rank " << r << " did not fail";
        EXPECT_EQ(code_of(errors[static_cast<size_t>(r)]), ErrorCode::kUnavailable);
        EXPECT_NE(what.find("ranks out of step"), std::string::npos) << what;
        EXPECT_NE(what.find("rank 0 ran collective 2 of step 2 (all_reduce_sum f32, 64 bytes)"), std::string::npos)
            << what;
        EXPECT_NE(what.find("rank 1 ran collective 0 of step 3 (all_reduce_sum f32, 64 bytes)"), std::string::npos)
            << what;
    }
    // Far below the 60 s timeout: the guard, not the timeout, ended it.
    EXPECT_LT(secs, 30.0);
    std::printf("[ figures  ] skipped collective: both ranks failed after %.3f s\n", secs);
    // The communicator stays broken.
    std::vector<float> v(16);
    EXPECT_THROW(comms[0]->all_reduce_sum(std::span<float>(v)), Error);
}

struct KindCase {
    const char* name;
    std::function<void(Communicator&)> run;
    bool root_sees_it = true;  // broadcast: only the non-roots receive a tag to compare
};

std::vector<KindCase> every_kind() {
    return {
        {"all_reduce_sum f32",
         [](Communicator& c) {
             std::vector<float> v(5, 1.0f);
             c.all_reduce_sum(std::span<float>(v));
         }},
        {"all_reduce_sum i64",
         [](Communicator& c) {
             std::vector<int64_t> v(3, 1);
             c.all_reduce_sum(std::span<int64_t>(v));
         }},
        {"all_reduce_max i64",
         [](Communicator& c) {
             std::vector<int64_t> v(3, 1);
             c.all_reduce_max(std::span<int64_t>(v));
         }},
        {"all_gather",
         [](Communicator& c) {
             std::vector<int32_t> in(2, 7), out(4);
             c.all_gather<int32_t>(in, out);
         }},
        {"all_gather_v",
         [](Communicator& c) {
             std::vector<int32_t> in(static_cast<size_t>(c.rank() + 1), 7), out(3);
             c.all_gather_v<int32_t>(in, {1, 2}, out);
         }},
        {"all_to_all_v",
         [](Communicator& c) {
             std::vector<int32_t> in(2, 7), out(2);
             c.all_to_all_v<int32_t>(in, {1, 1}, out, {1, 1});
         }},
        {"reduce_scatter",
         [](Communicator& c) {
             std::vector<float> in(4, 1.0f), out(2);
             c.reduce_scatter_sum(in, out);
         }},
        {"broadcast",
         [](Communicator& c) {
             std::vector<int32_t> v(3, c.rank());
             c.broadcast<int32_t>(v, 1);
         },
         false},
        {"barrier", [](Communicator& c) { c.barrier(); }},
    };
}

// Rank 1 is one step ahead; everything else about the collective is the same.
TEST(GuardedCommTest, EveryKindCatchesRanksOneStepApart) {
    for (const KindCase& k : every_kind()) {
        LocalCommGroup group(2, 60000ms, "test");
        const auto errors = run_ranks(2, [&](int rank) {
            auto comm = make_guarded_communicator(group.communicator(rank));
            if (rank == 1) comm->begin_step();
            k.run(*comm);
        });
        for (int r = 0; r < 2; ++r) {
            const std::string what = message_of(errors[static_cast<size_t>(r)]);
            if (r == 1 && !k.root_sees_it) {
                EXPECT_TRUE(what.empty()) << k.name << ": the root has nothing to compare: " << what;
                continue;
            }
            EXPECT_NE(what.find("ranks out of step"), std::string::npos) << k.name << " rank " << r << ": " << what;
            EXPECT_NE(what.find("rank 0 ran collective 0 of step 0"), std::string::npos) << k.name << ": " << what;
            EXPECT_NE(what.find("rank 1 ran collective 0 of step 1"), std::string::npos) << k.name << ": " << what;
        }
    }
}

TEST(GuardedCommTest, SizesThatDoNotLineUpNameThisRanksCollective) {
    LocalCommGroup group(2, 60000ms, "test");
    const auto errors = run_ranks(2, [&](int rank) {
        auto comm = make_guarded_communicator(group.communicator(rank));
        std::vector<float> v(rank == 0 ? 4 : 8, 1.0f);
        comm->all_reduce_sum(std::span<float>(v));
    });
    EXPECT_NE(message_of(errors[0]).find("this rank 0 ran collective 0 of step 0 (all_reduce_sum f32, 16 bytes)"),
              std::string::npos)
        << message_of(errors[0]);
    EXPECT_NE(message_of(errors[1]).find("this rank 1 ran collective 0 of step 0 (all_reduce_sum f32, 32 bytes)"),
              std::string::npos)
        << message_of(errors[1]);
}

}  // namespace
}  // namespace moeserve::parallel
