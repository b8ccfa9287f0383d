// DP control vote encoding and agreement (dp_control.h).
#include "moeserve/parallel/dp_control.h"

#include <algorithm>

#include "moeserve/core/error.h"

namespace moeserve::parallel {

DpControlRow encode_vote(const DpVote& v) {
    return {v.can_prefill, v.has_decode, v.has_unfinished, v.shutdown, v.num_tokens, v.num_reqs, v.forced_phase};
}

DpVote decode_vote(const DpControlRow& r) {
    return {.can_prefill = r[0] != 0,
            .has_decode = r[1] != 0,
            .has_unfinished = r[2] != 0,
            .shutdown = r[3] != 0,
            .num_tokens = r[4],
            .num_reqs = r[5],
            .forced_phase = r[6]};
}

DpAgreement agree(const std::vector<DpControlRow>& votes, int rank, bool pd_hybrid) {
    MOESERVE_CHECK(rank >= 0 && rank < static_cast<int>(votes.size()), "rank {} of {} votes", rank, votes.size());
    DpAgreement a;
    bool any_prefill = false, any_decode = false;
    for (const DpControlRow& row : votes) {
        const DpVote v = decode_vote(row);
        any_prefill |= v.can_prefill;
        any_decode |= v.has_decode;
        a.any_unfinished |= v.has_unfinished;
        a.shutdown |= v.shutdown;
        a.num_tokens.push_back(v.num_tokens);
        a.max_num_tokens = std::max(a.max_num_tokens, v.num_tokens);
        a.total_num_tokens += v.num_tokens;
    }
    if (pd_hybrid) {
        a.phase = any_prefill ? StepPhase::kPrefill : any_decode ? StepPhase::kDecode : StepPhase::kIdle;
    } else {
        a.phase = (any_prefill || any_decode) ? StepPhase::kMixed : StepPhase::kIdle;
    }
    const int64_t forced = decode_vote(votes[static_cast<size_t>(rank)]).forced_phase;
    if (forced >= 0) a.phase = static_cast<StepPhase>(forced);
    if (a.shutdown) a.phase = StepPhase::kIdle;
    return a;
}

std::vector<DpControlRow> gather_votes(Communicator& dp, const DpVote& vote) {
    const DpControlRow mine = encode_vote(vote);
    std::vector<DpControlRow> all(static_cast<size_t>(dp.size()));
    dp.all_gather_bytes(std::as_bytes(std::span<const DpControlRow>(&mine, 1)),
                        std::as_writable_bytes(std::span<DpControlRow>(all)));
    return all;
}

MoeExchangeKind exchange_for_phase(StepPhase phase, MoeExchangeKind mixed) {
    switch (phase) {
        case StepPhase::kPrefill:
            return MoeExchangeKind::kAllGather;
        case StepPhase::kDecode:
            return MoeExchangeKind::kAllToAll;
        default:
            return mixed;
    }
}

}  // namespace moeserve::parallel
