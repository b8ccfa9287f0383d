// DP control collective: what every rank derives from the votes (the group's demand, token
// counts), the coordinator's vote gather, agreed shutdown. The phase decided from the demand is
// the scheduling policy's (engine tests).
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

DpVote work(bool can_prefill, bool has_decode, int64_t num_tokens) {
    return {.can_prefill = can_prefill,
            .has_decode = has_decode,
            .has_unfinished = true,
            .shutdown = false,
            .num_tokens = num_tokens,
            .num_reqs = 1};
}

PhaseDemand demand(bool can_prefill, bool has_decode) { return {.can_prefill = can_prefill, .has_decode = has_decode}; }

TEST(DpControlTest, EncodeDecodeRoundTrip) {
    const DpVote v{.can_prefill = true,
                   .has_decode = false,
                   .has_unfinished = true,
                   .shutdown = true,
                   .num_tokens = 17,
                   .num_reqs = 3};
    const DpVote d = decode_vote(encode_vote(v));
    EXPECT_EQ(d.can_prefill, true);
    EXPECT_EQ(d.has_decode, false);
    EXPECT_EQ(d.has_unfinished, true);
    EXPECT_EQ(d.shutdown, true);
    EXPECT_EQ(d.num_tokens, 17);
    EXPECT_EQ(d.num_reqs, 3);
    EXPECT_FALSE(decode_vote(encode_vote(DpVote{})).shutdown);
}

TEST(DpControlTest, TheGroupDemandsWhatAnyRankDemands) {
    const DpVote prefill = work(true, false, 100);
    const DpVote decode = work(false, true, 4);
    const DpVote idle{};
    const DpVote blocked = work(false, false, 0);  // waiting but not admissible
    const DpAgreement a = agree(rows({decode, prefill, idle}));
    EXPECT_EQ(a.demand, demand(true, true));
    EXPECT_EQ(a.num_tokens, (std::vector<int64_t>{4, 100, 0}));
    EXPECT_EQ(a.max_num_tokens, 100);
    EXPECT_EQ(a.total_num_tokens, 104);
    EXPECT_EQ(agree(rows({decode, idle})).demand, demand(false, true));
    const DpAgreement none = agree(rows({idle, blocked}));
    EXPECT_EQ(none.demand, demand(false, false));
    EXPECT_TRUE(none.any_unfinished);
    EXPECT_FALSE(agree(rows({idle, idle})).any_unfinished);
}

TEST(DpControlTest, GatheredVotesGiveEveryRankTheSameAnswer) {
    LocalCommGroup group(3, 5000ms, "dp");
    std::vector<DpAgreement> got(3);
    auto errors = moeserve::testing::run_ranks(3, [&](int rank) {
        auto comm = group.communicator(rank);
        DpVote v;
        v.has_decode = rank != 1;
        v.can_prefill = rank == 2;
        v.num_tokens = rank * 10;
        got[static_cast<size_t>(rank)] = agree(gather_votes(*comm, v));
    });
    for (const auto& e : errors) ASSERT_FALSE(e);
    for (const auto& a : got) {
        EXPECT_EQ(a.demand, demand(true, true));
        EXPECT_EQ(a.num_tokens, (std::vector<int64_t>{0, 10, 20}));
    }
}

TEST(DpControlTest, OneShutdownVoteStopsEveryRankWhateverTheWork) {
    DpVote leaving = work(true, true, 8);
    leaving.shutdown = true;
    const DpVote busy = work(true, false, 100);
    EXPECT_TRUE(agree(rows({busy, leaving})).shutdown);
    EXPECT_TRUE(agree(rows({leaving, busy})).shutdown);
    EXPECT_FALSE(agree(rows({busy, busy})).shutdown);
}

TEST(DpControlTest, PhaseNamesAreDistinct) {
    EXPECT_STREQ(step_phase_name(StepPhase::kIdle), "idle");
    EXPECT_STREQ(step_phase_name(StepPhase::kPrefill), "prefill");
    EXPECT_STREQ(step_phase_name(StepPhase::kDecode), "decode");
    EXPECT_STREQ(step_phase_name(StepPhase::kMixed), "mixed");
}

}  // namespace
}  // namespace moeserve::parallel
