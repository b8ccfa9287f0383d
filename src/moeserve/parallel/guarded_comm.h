// The desync guard: a Communicator decorator that fails a group at once, naming both sides, when
// its ranks are out of step, instead of letting a mismatched collective hang until the timeout or
// silently mix two different collectives' bytes (issue 31).
//
// Every collective carries this rank's tag -- (step, index of the collective within the step,
// kind, bytes) -- inside its own payload, so the check adds bytes but no round trip:
//   - all-gathers, all-to-all and broadcast carry the 32-byte tag after each block; every rank
//     compares the tags it receives with its own (broadcast: the non-roots compare the root's);
//   - reductions carry a 48-bit digest of the tag as small integers, which must come back as
//     size x the rank's own on every rank (max: as its own, negated too); that holds only when
//     every rank had the same digest. On a mismatch every rank saw it, so they all-gather the full
//     tags and name the ranks that differ.
// A collective whose sizes do not line up fails in the inner communicator (Gloo's size check);
// the guard then adds this rank's tag to the message, so each side's log names where it was.
//
// Steps: begin_step() (Communicator) starts the group's next step. Every rank of a group calls it
// at the same point: the start of each model forward for TP and EP (MoeDecoder), of each DP
// round for DP (DpCoordinator). A rank that skipped a collective is then caught at the latest at
// the next step's first collective on that group.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "moeserve/parallel/comm.h"

namespace moeserve::parallel {

// Debug only (a test hook): this rank silently leaves out one collective, as a desynchronized
// caller would. step/index < 0: never.
struct SkipCollective {
    int64_t step = -1;
    int64_t index = -1;
};

// Wraps `inner` (any size); the guard's tags travel through `inner`'s collectives.
std::unique_ptr<Communicator> make_guarded_communicator(std::unique_ptr<Communicator> inner, SkipCollective skip = {});

}  // namespace moeserve::parallel
