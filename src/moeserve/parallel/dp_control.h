// The per-step DP control collective (docs/architecture.md "DP step protocol", step 2): one small
// all-gather of a fixed int64 vector per rank carries everything the DP groups must agree on
// before a step: the phase votes, token counts (to size collective buffers), and whether any rank
// still has unfinished requests. Every rank derives the same DpAgreement from the same gathered
// table, so nothing else needs to be exchanged.
//
//   rank vote -> [can_prefill, has_decode, has_unfinished, shutdown, num_tokens, num_reqs]
//   all-gather -> [dp, kDpControlFields] -> agree(): the group's demand, per-rank tokens, max/total,
//   any_unfinished, shutdown -> the scheduling policy decides the phase from the demand (DpCoordinator)
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "moeserve/core/step_phase.h"
#include "moeserve/parallel/comm.h"

namespace moeserve::parallel {

struct DpVote {
    bool can_prefill = false;     // this rank's PhaseDemand: a prefill can run now
    bool has_decode = false;      // and running requests decode
    bool has_unfinished = false;  // any request not finished (waiting, running, or preempted)
    bool shutdown = false;        // this rank leaves: every rank ends its loop in this round
    int64_t num_tokens = 0;       // tokens this rank would run in the step
    int64_t num_reqs = 0;         // running + waiting requests (informational)
};

constexpr int kDpControlFields = 6;
using DpControlRow = std::array<int64_t, kDpControlFields>;

DpControlRow encode_vote(const DpVote& vote);
DpVote decode_vote(const DpControlRow& row);

struct DpAgreement {
    PhaseDemand demand;               // the OR of the votes': what the group could run now
    std::vector<int64_t> num_tokens;  // [dp] each rank's tokens
    int64_t max_num_tokens = 0;
    int64_t total_num_tokens = 0;
    bool any_unfinished = false;
    bool shutdown = false;  // some rank voted shutdown: every rank ends its loop this round
};

// Pure: what every rank derives alike from the gathered votes [dp]. The phase is not decided
// here: the scheduling policy decides it from `demand` (one decider, SchedulingPolicy::decide_phase).
DpAgreement agree(const std::vector<DpControlRow>& votes);

// Collective over the DP group (one all-gather): every rank's encoded vote, in DP rank order.
// This is the gather DpCoordinator runs each round.
std::vector<DpControlRow> gather_votes(Communicator& dp, const DpVote& vote);

}  // namespace moeserve::parallel
