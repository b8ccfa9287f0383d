// DP control vote encoding and agreement (dp_control.h).
#include "moeserve/parallel/dp_control.h"

#include <algorithm>

namespace moeserve::parallel {

DpControlRow encode_vote(const DpVote& v) {
    return {v.can_prefill, v.has_decode, v.has_unfinished, v.shutdown, v.num_tokens, v.num_reqs};
}

DpVote decode_vote(const DpControlRow& r) {
    return {.can_prefill = r[0] != 0,
            .has_decode = r[1] != 0,
            .has_unfinished = r[2] != 0,
            .shutdown = r[3] != 0,
            .num_tokens = r[4],
            .num_reqs = r[5]};
}

DpAgreement agree(const std::vector<DpControlRow>& votes) {
    DpAgreement a;
    for (const DpControlRow& row : votes) {
        const DpVote v = decode_vote(row);
        a.demand.can_prefill |= v.can_prefill;
        a.demand.has_decode |= v.has_decode;
        a.any_unfinished |= v.has_unfinished;
        a.shutdown |= v.shutdown;
        a.num_tokens.push_back(v.num_tokens);
        a.max_num_tokens = std::max(a.max_num_tokens, v.num_tokens);
        a.total_num_tokens += v.num_tokens;
    }
    return a;
}

std::vector<DpControlRow> gather_votes(Communicator& dp, const DpVote& vote) {
    const DpControlRow mine = encode_vote(vote);
    std::vector<DpControlRow> all(static_cast<size_t>(dp.size()));
    dp.all_gather_bytes(std::as_bytes(std::span<const DpControlRow>(&mine, 1)),
                        std::as_writable_bytes(std::span<DpControlRow>(all)));
    return all;
}

}  // namespace moeserve::parallel
