// What a TP leader broadcasts to its TP followers each time it creates the KV cache or runs a
// forward (engine/engine_proc_tp.h). Plain structs that codec.h encodes like every ipc message;
// TpForward carries model::ForwardBatch field for field (engine_proc_tp.cpp maps them, and its
// structured bindings stop the build when ForwardBatch gains a field the map does not carry),
// except that block tables travel as per-sequence deltas.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace moeserve::ipc {

// Idle keepalive: keeps the followers' bounded broadcast wait from timing out.
struct TpNoop {};

struct TpCreateKv {
    int64_t num_blocks = 0;
    int64_t block_size = 0;
};

// One forward. Block tables: sequence i's table is the first table_keep[i] blocks of the table
// the follower holds for seq_ids[i] from the previous forward, then table_new_count[i] blocks
// of table_new; rows are padded with block 0 to max_blocks_per_seq. Only the previous forward's
// sequences are held, and a forward without seq_ids, or with an id twice, sends every table whole
// (table_keep all 0) and holds nothing.
struct TpForward {
    std::vector<int32_t> token_ids;        // [num_tokens]
    std::vector<int32_t> positions;        // [num_tokens]
    std::vector<int64_t> slot_mapping;     // [num_tokens]
    std::vector<int32_t> query_start;      // [num_seqs + 1]
    std::vector<int32_t> seq_lens;         // [num_seqs]
    std::vector<int64_t> seq_ids;          // [num_seqs] or empty
    std::vector<int32_t> table_keep;       // [num_seqs]
    std::vector<int32_t> table_new_count;  // [num_seqs]
    std::vector<int32_t> table_new;        // [sum of table_new_count]
    int64_t max_blocks_per_seq = 0;
    std::vector<int32_t> logits_rows;
    int32_t moe_exchange = 0;          // parallel::MoeExchangeKind
    bool dummy = false;                // ForwardBatch::dummy
    std::vector<int32_t> hidden_rows;  // ForwardBatch::hidden_rows
    bool draft_head = false;           // run by Model::forward_draft, not forward
};

// The leader leaves: the followers' loop returns.
struct TpShutdown {};

// PD disaggregation (engine/kv_transfer/kv_transfer_group.h). Every rank gathers each rank's KV
// endpoint and parts (after the KV cache is created, and again after the group re-formed).
// generation: the leader's count of KV caches announced; a rank serves blocks only to fetches of
// its own generation (a re-formed group's new follower never serves a transfer from before).
struct TpKvExchange {
    int64_t generation = 0;
};

// A consumer's fetch, which every TP rank runs for its own parts (the block ids are the same on
// every rank: the leader's scheduler owns them).
struct TpKvFetchJob {
    std::string id, endpoint, remote_id;
    std::vector<int32_t> block_ids;
    int32_t skip_blocks = 0;
    std::vector<int32_t> prompt_token_ids;
};
struct TpKvFetch {
    std::vector<TpKvFetchJob> jobs;
};
struct TpKvCancel {
    std::vector<std::string> ids;
};
// Then every rank takes part in one all_reduce_max over 2 x ids.size() values: per id, 1 while
// its fetch still runs there, then (TP rank + 1) if it failed there.
struct TpKvPoll {
    std::vector<std::string> ids;
};

using TpMessage =
    std::variant<TpNoop, TpCreateKv, TpForward, TpShutdown, TpKvExchange, TpKvFetch, TpKvCancel, TpKvPoll>;

}  // namespace moeserve::ipc
