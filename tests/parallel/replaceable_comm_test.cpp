// RegroupableContext / ReplaceableCommunicator (self-healing groups): holders keep the same
// communicator objects across generations; a closed generation fails fast; a re-formed group runs
// collectives again, its step count starting over.
#include "moeserve/parallel/replaceable_comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>

#include "moeserve/core/error.h"
#include "run_ranks.h"

namespace moeserve::parallel {
namespace {

using namespace std::chrono_literals;

TEST(ReplaceableCommTest, AReformedGroupRunsBehindTheSameObjects) {
    const ParallelSizes sizes{2, 1, 2};  // dp 2, tp 1, ep 2
    // Both worlds outlive the contexts (LocalWorld's rule).
    LocalWorld first = make_local_world(sizes, 5000ms), second = make_local_world(sizes, 5000ms);
    std::vector<std::optional<RegroupableContext>> groups(2);
    std::vector<Communicator*> held(2);
    for (int r = 0; r < 2; ++r) {
        groups[static_cast<size_t>(r)].emplace(std::move(first.ranks[static_cast<size_t>(r)]));
        held[static_cast<size_t>(r)] = groups[static_cast<size_t>(r)]->context().ep.get();
    }
    const auto sum_of_ranks = [&](int r) {
        Communicator& ep = *held[static_cast<size_t>(r)];
        ep.begin_step();
        std::vector<float> v = {static_cast<float>(r + 1)};
        ep.all_reduce_sum(v);
        EXPECT_EQ(v[0], 3.0f);
    };
    for (const auto& e : testing::run_ranks(2, sum_of_ranks)) EXPECT_EQ(e, nullptr);

    // The group breaks: each rank closes its generation; a collective fails at once, naming the group.
    for (auto& g : groups) g->disconnect();
    try {
        std::vector<float> v = {1.0f};
        held[0]->all_reduce_sum(v);
        FAIL() << "a closed generation ran a collective";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
        EXPECT_NE(std::string(e.what()).find("re-forming"), std::string::npos) << e.what();
    }

    // The next generation goes behind the same objects (rank, size and name kept).
    for (int r = 0; r < 2; ++r)
        groups[static_cast<size_t>(r)]->regroup(std::move(second.ranks[static_cast<size_t>(r)]));
    EXPECT_EQ(held[1]->rank(), 1);
    EXPECT_EQ(held[1]->size(), 2);
    for (const auto& e : testing::run_ranks(2, sum_of_ranks)) EXPECT_EQ(e, nullptr);
}

TEST(ReplaceableCommTest, RefusesAGroupOfAnotherShape) {
    LocalWorld two = make_local_world({2, 1, 2}, 5000ms);
    RegroupableContext group(std::move(two.ranks[0]));
    LocalWorld four = make_local_world({4, 1, 4}, 5000ms);
    EXPECT_THROW(group.regroup(std::move(four.ranks[0])), Error);
}

}  // namespace
}  // namespace moeserve::parallel
