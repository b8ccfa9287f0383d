// The per-step DP control collective (docs/architecture.md "DP step protocol", step 2): one small
// all-gather of a fixed int64 vector per rank carries everything the DP groups must agree on
// before a step: the phase votes, token counts (to size collective buffers), and whether any rank
// still has unfinished requests. Every rank derives the same DpAgreement from the same gathered
// table, so nothing else needs to be exchanged.
//
//   rank vote -> [can_prefill, has_decode, has_unfinished, shutdown, num_tokens, num_reqs, forced_phase]
//   all-gather -> [dp, kDpControlFields] -> agree(): phase, per-rank tokens, max/total, any_*, shutdown
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "moeserve/core/step_phase.h"
#include "moeserve/parallel/comm.h"
#include "moeserve/parallel/moe_exchange.h"

namespace moeserve::parallel {

struct DpVote {
    // An admissible waiting request exists now (KV blocks and max-num-seqs allow it): vote on
    // "can prefill now", never on "has waiting requests" (issue #8).
    bool can_prefill = false;
    bool has_decode = false;      // running requests that decode this step
    bool has_unfinished = false;  // any request not finished (waiting, running, or preempted)
    bool shutdown = false;        // this rank leaves: every rank ends its loop in this round
    int64_t num_tokens = 0;       // tokens this rank would run in the step
    int64_t num_reqs = 0;         // running + waiting requests (informational)
    // Debug only (a test of bounded failure): >= 0 overrides this rank's view of the agreed phase
    // with StepPhase(forced_phase), desynchronizing the exchange choice on purpose.
    int64_t forced_phase = -1;
};

constexpr int kDpControlFields = 7;
using DpControlRow = std::array<int64_t, kDpControlFields>;

DpControlRow encode_vote(const DpVote& vote);
DpVote decode_vote(const DpControlRow& row);

struct DpAgreement {
    StepPhase phase = StepPhase::kIdle;  // the same on every rank (unless a vote forced it)
    std::vector<int64_t> num_tokens;     // [dp] each rank's tokens
    int64_t max_num_tokens = 0;
    int64_t total_num_tokens = 0;
    bool any_unfinished = false;
    bool shutdown = false;  // some rank voted shutdown; phase is then kIdle on every rank
    // kIdle: nobody steps (no spinning); otherwise every rank runs a forward of `phase`: real
    // work, or a dummy batch when it has none of that phase.
    bool run_step() const { return phase != StepPhase::kIdle; }
};

// Pure: the agreement `rank` derives from the gathered votes [dp]. Any shutdown vote: kIdle.
// Otherwise pd_hybrid: kPrefill if any rank can prefill, else kDecode if any has decode work,
// else kIdle; without it: kMixed if any rank has either, else kIdle. A forced_phase >= 0 in
// `rank`'s own vote then replaces the phase (not under shutdown).
DpAgreement agree(const std::vector<DpControlRow>& votes, int rank, bool pd_hybrid);

// Collective over the DP group (one all-gather): every rank's encoded vote, in DP rank order.
// This is the gather DpCoordinator runs each round.
std::vector<DpControlRow> gather_votes(Communicator& dp, const DpVote& vote);

// The MoE exchange of a phase: prefill -> padded all-gather, decode -> all-to-all-v, mixed ->
// `mixed` (configurable). Deterministic, so ranks that agree on the phase agree on the exchange.
MoeExchangeKind exchange_for_phase(StepPhase phase, MoeExchangeKind mixed = MoeExchangeKind::kAllToAll);

}  // namespace moeserve::parallel
