// TP leader/follower: every announcement is one ipc::TpMessage (ipc/tp_messages.h, encoded by
// ipc/codec.h), broadcast as its byte length and then its bytes. A forward's block tables go as
// deltas against the previous forward's (TpForward's comment).
#include "moeserve/engine/engine_proc_tp.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "moeserve/core/error.h"
#include "moeserve/ipc/codec.h"

namespace moeserve::engine {

namespace {

// Row i of a [num_seqs, max_blocks] block table without its padding: block 0 is the null block
// that no sequence holds, so trailing zeros are padding.
std::span<const int32_t> table_row(const std::vector<int32_t>& tables, int64_t max_blocks, size_t i) {
    const auto* begin = tables.data() + i * static_cast<size_t>(max_blocks);
    const auto* end = begin + max_blocks;
    while (end > begin && end[-1] == 0) --end;
    return {begin, end};
}

}  // namespace

ipc::TpForward TpTables::encode(const model::ForwardBatch& batch) {
    // Every ForwardBatch field once: this binding stops the build when ForwardBatch gains a field
    // (carry it in ipc::TpForward, here and in decode()).
    const auto& [token_ids, positions, slot_mapping, query_start, seq_lens, seq_ids, block_tables, max_blocks_per_seq,
                 logits_rows, moe_exchange, dummy, hidden_rows] = batch;
    const size_t seqs = seq_lens.size();
    MOESERVE_CHECK(positions.size() == token_ids.size() && slot_mapping.size() == token_ids.size() &&
                       query_start.size() == seqs + 1 &&
                       block_tables.size() == seqs * static_cast<size_t>(max_blocks_per_seq) &&
                       (seq_ids.empty() || seq_ids.size() == seqs),
                   "inconsistent ForwardBatch: {} tokens, {} positions, {} slots, {} query starts, {} seq ids, {} "
                   "table entries of {} per seq for {} seqs",
                   token_ids.size(), positions.size(), slot_mapping.size(), query_start.size(), seq_ids.size(),
                   block_tables.size(), max_blocks_per_seq, seqs);
    ipc::TpForward w;
    w.token_ids = token_ids;
    w.positions = positions;
    w.slot_mapping = slot_mapping;
    w.query_start = query_start;
    w.seq_lens = seq_lens;
    w.max_blocks_per_seq = max_blocks_per_seq;
    w.logits_rows = logits_rows;
    w.moe_exchange = static_cast<int32_t>(moe_exchange);
    w.dummy = dummy;
    w.hidden_rows = hidden_rows;
    w.seq_ids = seq_ids;
    const bool keyed = begin_forward(seq_ids);
    w.table_keep.resize(seqs);
    w.table_new_count.resize(seqs);
    for (size_t i = 0; i < seqs; ++i) {
        const std::span<const int32_t> row = table_row(block_tables, max_blocks_per_seq, i);
        size_t keep = 0;
        if (keyed) {
            Held& h = held_[seq_ids[i]];
            keep = static_cast<size_t>(std::mismatch(h.table.begin(), h.table.end(), row.begin(), row.end()).first -
                                       h.table.begin());
            h.table.assign(row.begin(), row.end());
        }
        w.table_keep[i] = static_cast<int32_t>(keep);
        w.table_new_count[i] = static_cast<int32_t>(row.size() - keep);
        w.table_new.insert(w.table_new.end(), row.begin() + static_cast<std::ptrdiff_t>(keep), row.end());
    }
    forget_absent();
    return w;
}

void TpTables::decode(const ipc::TpForward& w, model::ForwardBatch& batch) {
    auto& [token_ids, positions, slot_mapping, query_start, seq_lens, seq_ids, block_tables, max_blocks_per_seq,
           logits_rows, moe_exchange, dummy, hidden_rows] = batch;
    const size_t seqs = w.seq_lens.size();
    const size_t tokens = w.token_ids.size();
    if (w.positions.size() != tokens || w.slot_mapping.size() != tokens || w.query_start.size() != seqs + 1 ||
        (!w.seq_ids.empty() && w.seq_ids.size() != seqs) || w.table_keep.size() != seqs ||
        w.table_new_count.size() != seqs || w.max_blocks_per_seq < 0 ||
        (w.moe_exchange != static_cast<int32_t>(parallel::MoeExchangeKind::kAllToAll) &&
         w.moe_exchange != static_cast<int32_t>(parallel::MoeExchangeKind::kAllGather))) {
        raise(ErrorCode::kInvalidArgument,
              "TP follower: malformed forward from the leader ({} tokens, {} positions, {} slots, {} query starts, "
              "{} seqs, {} seq ids, moe exchange {})",
              tokens, w.positions.size(), w.slot_mapping.size(), w.query_start.size(), seqs, w.seq_ids.size(),
              w.moe_exchange);
    }
    token_ids = w.token_ids;
    positions = w.positions;
    slot_mapping = w.slot_mapping;
    query_start = w.query_start;
    seq_lens = w.seq_lens;
    seq_ids = w.seq_ids;
    max_blocks_per_seq = w.max_blocks_per_seq;
    logits_rows = w.logits_rows;
    moe_exchange = static_cast<parallel::MoeExchangeKind>(w.moe_exchange);
    dummy = w.dummy;
    hidden_rows = w.hidden_rows;
    const bool keyed = begin_forward(w.seq_ids);
    block_tables.assign(seqs * static_cast<size_t>(w.max_blocks_per_seq), 0);
    size_t next = 0;
    for (size_t i = 0; i < seqs; ++i) {
        const auto keep = static_cast<size_t>(w.table_keep[i]);
        const auto count = static_cast<size_t>(w.table_new_count[i]);
        Held scratch;
        Held& h = keyed ? held_[w.seq_ids[i]] : scratch;
        if (w.table_keep[i] < 0 || w.table_new_count[i] < 0 || keep > h.table.size() ||
            next + count > w.table_new.size() || keep + count > static_cast<size_t>(w.max_blocks_per_seq)) {
            raise(ErrorCode::kInvalidArgument,
                  "TP follower: block table of sequence {} keeps {} of {} held blocks and adds {} ({} of {} sent "
                  "used, {} per row): out of step with the leader",
                  i, w.table_keep[i], h.table.size(), w.table_new_count[i], next, w.table_new.size(),
                  w.max_blocks_per_seq);
        }
        h.table.resize(keep);
        h.table.insert(h.table.end(), w.table_new.begin() + static_cast<std::ptrdiff_t>(next),
                       w.table_new.begin() + static_cast<std::ptrdiff_t>(next + count));
        h.forward = forward_;
        next += count;
        std::copy(h.table.begin(), h.table.end(),
                  block_tables.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(w.max_blocks_per_seq)));
    }
    forget_absent();
}

bool TpTables::begin_forward(const std::vector<int64_t>& seq_ids) {
    // Deltas only with one id per sequence (else whole tables, and nothing is held): stamp every
    // id with this forward; an id stamped twice is a repeat.
    ++forward_;
    bool keyed = !seq_ids.empty();
    for (size_t i = 0; keyed && i < seq_ids.size(); ++i) {
        int64_t& stamp = held_[seq_ids[i]].forward;
        keyed = stamp != forward_;
        stamp = forward_;
    }
    if (!keyed) held_.clear();
    return keyed;
}

void TpTables::forget_absent() {
    std::erase_if(held_, [&](const auto& kv) { return kv.second.forward != forward_; });
}

size_t TpTables::blocks_held() const {
    size_t n = 0;
    for (const auto& [id, h] : held_) n += h.table.size();
    return n;
}

TpLeaderModel::TpLeaderModel(model::Model& inner, parallel::Communicator& tp, std::chrono::milliseconds keepalive)
    : inner_(inner), tp_(tp), keepalive_(keepalive), last_sent_(std::chrono::steady_clock::now()) {
    MOESERVE_CHECK(tp.rank() == 0, "the TP leader must be TP rank 0, not {}", tp.rank());
}

void TpLeaderModel::send(const ipc::TpMessage& message) const {
    std::string bytes = ipc::encode(message);
    int64_t size = static_cast<int64_t>(bytes.size());
    tp_.broadcast(std::span<int64_t>(&size, 1), 0);
    tp_.broadcast_bytes(std::as_writable_bytes(std::span<char>(bytes.data(), bytes.size())), 0);
    last_sent_ = std::chrono::steady_clock::now();
}

std::unique_ptr<model::KvCache> TpLeaderModel::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    kv_shape_ = ipc::TpCreateKv{num_blocks, block_size};
    send(*kv_shape_);
    ++kv_generation_;
    return inner_.create_kv_cache(num_blocks, block_size);
}

void TpLeaderModel::regrouped() {
    tables_ = TpTables();
    if (kv_shape_) {
        send(*kv_shape_);
        ++kv_generation_;
    }
}

TensorView TpLeaderModel::forward(const model::ForwardBatch& b, model::KvCache& kv) {
    send(tables_.encode(b));
    return inner_.forward(b, kv);
}

TensorView TpLeaderModel::forward_draft(const model::ForwardBatch& b, model::KvCache& kv) {
    ipc::TpForward w = tables_.encode(b);
    w.draft_head = true;
    send(w);
    return inner_.forward_draft(b, kv);
}

void TpLeaderModel::keepalive() {
    if (std::chrono::steady_clock::now() - last_sent_ >= keepalive_) send(ipc::TpNoop{});
}

void TpLeaderModel::shutdown() {
    try {
        send(ipc::TpShutdown{});
    } catch (const Error&) {
        // the peers are gone already; nothing to tell them
    }
}

int run_tp_follower(model::Model& model, parallel::Communicator& tp, Logger& logger, KvTransferFollower* kv_transfer) {
    std::unique_ptr<model::KvCache> kv;
    // The KV transfer's agent goes before the cache it writes into, however this loop ends.
    struct DropKv {
        KvTransferFollower* follower;
        ~DropKv() {
            if (follower) follower->kv_dropped();
        }
    } drop_kv{kv_transfer};
    std::vector<std::byte> bytes;
    model::ForwardBatch b;
    TpTables tables;
    int64_t forwards = 0;
    while (true) {
        int64_t size = 0;
        tp.broadcast(std::span<int64_t>(&size, 1), 0);
        if (size <= 0) raise(ErrorCode::kInvalidArgument, "TP follower: the leader announced a {}-byte message", size);
        bytes.resize(static_cast<size_t>(size));
        tp.broadcast_bytes(std::span<std::byte>(bytes), 0);
        const ipc::TpMessage message =
            ipc::decode_tp_message(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
        if (const auto* create = std::get_if<ipc::TpCreateKv>(&message)) {
            if (kv_transfer) kv_transfer->kv_dropped();
            kv = model.create_kv_cache(create->num_blocks, create->block_size);
            if (kv_transfer) kv_transfer->kv_created(*kv);
            MOESERVE_LOG_I(logger, "engine", "TP follower: KV cache of %lld blocks of %lld tokens",
                           static_cast<long long>(create->num_blocks), static_cast<long long>(create->block_size));
        } else if (const auto* forward = std::get_if<ipc::TpForward>(&message)) {
            MOESERVE_CHECK(kv != nullptr, "TP follower got a forward before the KV cache was created");
            tables.decode(*forward, b);
            if (forward->draft_head) {
                model.forward_draft(b, *kv);
            } else {
                model.forward(b, *kv);
            }
            if (kv_transfer) kv_transfer->forward_done();
            ++forwards;
        } else if (kv_transfer && kv_transfer->handle(message, tp)) {
            // a KV transfer message, handled
        } else if (std::holds_alternative<ipc::TpShutdown>(message)) {
            MOESERVE_LOG_I(logger, "engine", "TP follower: leader shut down after %lld forwards",
                           static_cast<long long>(forwards));
            return 0;
        }
    }
}

}  // namespace moeserve::engine
