// ForwardBatch: what the model sees of a step (vLLM's model-runner boundary, llama.cpp's ubatch).
// Flattened tokens of all sequences, their positions and KV slots, per-sequence block tables,
// and the rows that need logits. The model never sees a Request.
//
//   seq 0: 5 new tokens (prefill chunk)   seq 1: 1 new token (decode)
//   token_ids    [t t t t t | t]          query_start [0, 5, 6]
//   positions    [0 1 2 3 4 | 9]          seq_lens    [5, 10]   (tokens in cache after this step)
//   logits_rows  [4, 5]                   -> logits [2, vocab]
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/core/error.h"

#include "moeserve/parallel/moe_exchange.h"

namespace moeserve::model {

struct ForwardBatch {
    std::vector<int32_t> token_ids;     // [num_tokens]
    std::vector<int32_t> positions;     // [num_tokens]
    std::vector<int64_t> slot_mapping;  // [num_tokens] block_id * block_size + offset; < 0: padding
    std::vector<int32_t> query_start;   // [num_seqs + 1]
    std::vector<int32_t> seq_lens;      // [num_seqs] total tokens in the cache after this step
    // [num_seqs] or empty: an id per sequence, stable while it runs (the engine's request number).
    // The model ignores it; the TP broadcast sends block-table deltas by it (engine_proc_tp.h).
    std::vector<int64_t> seq_ids;
    std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq], unused entries 0
    int64_t max_blocks_per_seq = 0;
    std::vector<int32_t> logits_rows;  // token rows (indices into token_ids) that need logits
    // MoE exchange of this step under expert parallelism; every rank of the EP group must pass the
    // same (the engine's DpCoordinatorOptions pick it per agreed phase). Ignored on a single rank.
    parallel::MoeExchangeKind moe_exchange = parallel::MoeExchangeKind::kAllToAll;
    // A dummy batch (DP lock-step: this rank had nothing of the step's phase): its token is
    // padding, so EPLB does not count where it routes.
    bool dummy = false;
    // Model::forward_draft only: [num_tokens] the row of the last forward() whose final hidden
    // state token i continues (token i is the token after that row's position).
    std::vector<int32_t> hidden_rows;

    int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
    int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
};

// Checks what a forward relies on (the engine builds batches; a bad one is a bug, so CHECK):
// sizes agree, ids in [0, vocab_size), positions in [0, num_positions).
inline void check_forward_batch(const ForwardBatch& b, int64_t vocab_size, int64_t num_positions) {
    const int64_t t = b.num_tokens();
    MOESERVE_CHECK(
        t > 0 && b.positions.size() == static_cast<size_t>(t) && b.slot_mapping.size() == static_cast<size_t>(t),
        "malformed batch: {} tokens, {} positions, {} slots", t, b.positions.size(), b.slot_mapping.size());
    for (int32_t pos : b.positions) {
        MOESERVE_CHECK(pos >= 0 && pos < num_positions, "position {} outside [0, {})", pos, num_positions);
    }
    for (int32_t id : b.token_ids) {
        MOESERVE_CHECK(id >= 0 && id < vocab_size, "token id {} outside [0, {})", id, vocab_size);
    }
    for (int32_t row : b.logits_rows) {
        MOESERVE_CHECK(row >= 0 && row < t, "logits row {} outside [0, {})", row, t);
    }
}

}  // namespace moeserve::model
