// DP control collective: phase agreement rules, one gather per step, forced mismatch.
#include "moeserve/parallel/dp_control.h"

#include <gtest/gtest.h>

#include <chrono>

#include "moeserve/parallel/local_comm.h"
#include "parallel/run_ranks.h"

namespace moeserve::parallel {
namespace {

using namespace std::chrono_literals;

std::vector<DpControlRow> rows(const std::vector<DpVote>& votes) {
    std::vector<DpControlRow> r;
    for (const auto& v : votes) r.push_back(encode_vote(v));
    return r;
}

TEST(DpControlTest, EncodeDecodeRoundTrip) {
    const DpVote v{true, false, true, 17, 3, -1};
    const DpVote d = decode_vote(encode_vote(v));
    EXPECT_EQ(d.can_prefill, true);
    EXPECT_EQ(d.has_decode, false);
    EXPECT_EQ(d.has_unfinished, true);
    EXPECT_EQ(d.num_tokens, 17);
    EXPECT_EQ(d.num_reqs, 3);
    EXPECT_EQ(d.forced_phase, -1);
}

TEST(DpControlTest, HybridPrefillWinsThenDecodeThenIdle) {
    const DpVote prefill{true, false, true, 100, 1, -1};
    const DpVote decode{false, true, true, 4, 4, -1};
    const DpVote idle{};
    const DpVote blocked{false, false, true, 0, 0, -1};  // waiting but not admissible
    auto a = agree(rows({decode, prefill, idle}), 0, true);
    EXPECT_EQ(a.phase, StepPhase::kPrefill);
    EXPECT_EQ(a.num_tokens, (std::vector<int64_t>{4, 100, 0}));
    EXPECT_EQ(a.max_num_tokens, 100);
    EXPECT_EQ(a.total_num_tokens, 104);
    EXPECT_EQ(agree(rows({decode, idle}), 1, true).phase, StepPhase::kDecode);
    const auto none = agree(rows({idle, blocked}), 0, true);
    EXPECT_EQ(none.phase, StepPhase::kIdle);
    EXPECT_FALSE(none.run_step());
    EXPECT_TRUE(none.any_unfinished);
    EXPECT_EQ(agree(rows({decode, prefill}), 0, false).phase, StepPhase::kMixed);
    EXPECT_EQ(agree(rows({idle, idle}), 0, false).phase, StepPhase::kIdle);
}

TEST(DpControlTest, ExchangeFollowsPhase) {
    EXPECT_EQ(exchange_for_phase(StepPhase::kPrefill), MoeExchangeKind::kAllGather);
    EXPECT_EQ(exchange_for_phase(StepPhase::kDecode), MoeExchangeKind::kAllToAll);
    EXPECT_EQ(exchange_for_phase(StepPhase::kMixed, MoeExchangeKind::kAllGather), MoeExchangeKind::kAllGather);
}

TEST(DpControlTest, AgreeStepGivesEveryRankTheSameAnswer) {
    LocalCommGroup group(3, 5000ms, "dp");
    std::vector<DpAgreement> got(3);
    auto errors = moeserve::testing::run_ranks(3, [&](int rank) {
        auto comm = group.communicator(rank);
        DpVote v;
        v.has_decode = rank != 1;
        v.can_prefill = rank == 2;
        v.num_tokens = rank * 10;
        got[static_cast<size_t>(rank)] = agree_step(*comm, v, true);
    });
    for (const auto& e : errors) ASSERT_FALSE(e);
    for (const auto& a : got) {
        EXPECT_EQ(a.phase, StepPhase::kPrefill);
        EXPECT_EQ(a.num_tokens, (std::vector<int64_t>{0, 10, 20}));
    }
}

TEST(DpControlTest, ForcedPhaseOverridesOnlyThatRank) {
    DpVote forced{false, true, true, 1, 1, static_cast<int64_t>(StepPhase::kPrefill)};
    DpVote normal{false, true, true, 1, 1, -1};
    EXPECT_EQ(agree(rows({forced, normal}), 0, true).phase, StepPhase::kPrefill);
    EXPECT_EQ(agree(rows({forced, normal}), 1, true).phase, StepPhase::kDecode);
}

}  // namespace
}  // namespace moeserve::parallel
