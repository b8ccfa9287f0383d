// MoE dispatch/combine over an EP group: moves each token's row to the ranks that own its chosen
// experts and brings the weighted expert outputs back. Two algorithms, selectable per step (all
// ranks of the group must pick the same one; dp_control.h makes them agree):
//
//   kAllToAll (decode): counts all-to-all, then rows all-to-all-v to exactly the ranks that own
//       one of the token's experts; combine is the reverse all-to-all-v and a sum per token.
//   kAllGather (prefill): padded all-gather of every rank's rows (gather.h), each rank runs its
//       experts over all of them, then a reduce-scatter of the padded [size, max, hidden] partials.
//
// Expert e is owned by EP rank e / experts_per_rank. The caller runs its local experts between
// dispatch() and combine() on local rows, skipping expert ids it does not own (the MoE kernel does
// this with expert_begin/num_experts). Results equal the single-rank result up to f32 summation
// order. Not thread-safe; one per rank, reused across layers and steps: every buffer is a member
// that grows on demand, so a step allocates nothing once the buffers reached its sizes.
//
// Per forward: a rank's token count stays the same from layer to layer until its decoder drops
// rows (the last layer keeps only the logits rows), so after begin_forward() the padded all-gather
// exchanges the counts in the next layer only and the later layers reuse them. Every rank of the
// group must call begin_forward() at the same points (the start of each forward, and before a
// layer whose count may change); a rank that never calls it exchanges the counts in every layer.
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/parallel/comm.h"
#include "moeserve/parallel/gather.h"

namespace moeserve::parallel {

enum class MoeExchangeKind { kAllToAll, kAllGather };

const char* moe_exchange_name(MoeExchangeKind kind);

struct MoeTokens {
    const float* x = nullptr;             // f32 [num_tokens, hidden]
    const int32_t* topk_ids = nullptr;    // int32 [num_tokens, k], global expert ids
    const float* topk_weights = nullptr;  // f32 [num_tokens, k]
    int64_t num_tokens = 0;
    int64_t hidden = 0;
    int k = 0;
};

class MoeExchange {
public:
    // Marks the start of a forward: the next kAllGather dispatch exchanges the token counts, and
    // the ones after it (same forward, same token count on every rank) reuse them. Local (no
    // collective), but every rank of the group must call it at the same point.
    void begin_forward();

    // Collective over `ep`. Afterwards local_*() describe the rows this rank must run.
    void dispatch(Communicator& ep, MoeExchangeKind kind, const MoeTokens& tokens, int64_t experts_per_rank);

    int64_t num_local() const { return num_local_; }
    const float* local_x() const { return local_x_.data(); }        // f32 [num_local, hidden]
    const int32_t* local_ids() const { return local_ids_.data(); }  // int32 [num_local, k]
    const float* local_weights() const { return local_w_.data(); }  // f32 [num_local, k]
    float* local_out() { return local_out_.data(); }                // f32 [num_local, hidden], caller fills

    // Collective: out f32 [num_tokens, hidden] (of the last dispatch) = the sum over ranks of
    // their local_out rows for this rank's tokens.
    void combine(Communicator& ep, float* out);

private:
    void pack(const MoeTokens& t, int64_t token, float* dst) const;
    void unpack(const float* records, int64_t n);

    MoeExchangeKind kind_ = MoeExchangeKind::kAllToAll;
    int64_t hidden_ = 0, num_tokens_ = 0, num_local_ = 0;
    int k_ = 0;
    int64_t width_ = 0;  // record width in floats: hidden + 2k
    std::vector<float> send_, recv_;
    std::vector<int64_t> send_rows_, recv_rows_;                // all-to-all: rows to / from each rank
    std::vector<int32_t> send_token_;                           // all-to-all: token index of each sent row
    std::vector<int32_t> owners_;                               // all-to-all: [num_tokens, k] owner ranks, -1 = repeat
    std::vector<int64_t> fill_;                                 // all-to-all: next send row of each rank
    std::vector<size_t> send_bytes_, recv_bytes_, ones_bytes_;  // all-to-all-v sizes
    std::vector<int64_t> counts_;                               // all-gather: every rank's num_tokens
    bool per_forward_ = false;                                  // begin_forward() was called: reuse counts_
    bool counts_valid_ = false;                                 // counts_ hold this forward's counts
    PaddedGatherScratch gather_;  // all-gather: the gather's buffers; combine reuses .padded
    std::vector<float> local_x_, local_w_, local_out_;
    std::vector<int32_t> local_ids_;
};

}  // namespace moeserve::parallel
