// TP leader/follower: a fixed int64 header per announcement, then the ForwardBatch's vectors
// packed into one byte buffer (sizes derived from the header, so one broadcast carries them all).
#include "moeserve/engine/engine_proc_tp.h"

#include <array>
#include <cstring>
#include <vector>

#include "moeserve/core/error.h"

namespace moeserve::engine {

namespace {

using Header = std::array<int64_t, 8>;

// header[0]
enum Kind : int64_t { kNoop = 0, kCreateKv = 1, kForward = 2, kShutdown = 3 };
// kForward: [kind, num_tokens, num_seqs, max_blocks_per_seq, num_logits_rows, moe_exchange,
//            block_tables size, payload bytes]
// kCreateKv: [kind, num_blocks, block_size, 0...]

template <typename T>
void put(std::vector<std::byte>& out, size_t& at, const std::vector<T>& v) {
    const size_t n = v.size() * sizeof(T);
    if (n > 0) std::memcpy(out.data() + at, v.data(), n);
    at += n;
}

template <typename T>
void take(const std::vector<std::byte>& in, size_t& at, std::vector<T>& v, int64_t count) {
    v.resize(static_cast<size_t>(count));
    const size_t n = v.size() * sizeof(T);
    MOESERVE_CHECK(at + n <= in.size(), "TP batch payload too short: need {} bytes at {}, have {}", n, at, in.size());
    if (n > 0) std::memcpy(v.data(), in.data() + at, n);
    at += n;
}

size_t payload_bytes(int64_t tokens, int64_t seqs, int64_t tables, int64_t rows) {
    return static_cast<size_t>(tokens * (4 + 4 + 8) + (2 * seqs + 1) * 4 + tables * 4 + rows * 4);
}

}  // namespace

TpLeaderModel::TpLeaderModel(model::Model& inner, parallel::Communicator& tp, std::chrono::milliseconds keepalive)
    : inner_(inner), tp_(tp), keepalive_(keepalive), last_sent_(std::chrono::steady_clock::now()) {
    MOESERVE_CHECK(tp.rank() == 0, "the TP leader must be TP rank 0, not {}", tp.rank());
}

void TpLeaderModel::send_header(const Header& header) const {
    Header h = header;
    tp_.broadcast(std::span<int64_t>(h), 0);
    last_sent_ = std::chrono::steady_clock::now();
}

std::unique_ptr<model::KvCache> TpLeaderModel::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    send_header({kCreateKv, num_blocks, block_size, 0, 0, 0, 0, 0});
    return inner_.create_kv_cache(num_blocks, block_size);
}

TensorView TpLeaderModel::forward(const model::ForwardBatch& b, model::KvCache& kv) {
    const int64_t tokens = b.num_tokens(), seqs = b.num_seqs();
    const int64_t tables = static_cast<int64_t>(b.block_tables.size());
    const int64_t rows = static_cast<int64_t>(b.logits_rows.size());
    MOESERVE_CHECK(b.positions.size() == b.token_ids.size() && b.slot_mapping.size() == b.token_ids.size() &&
                       b.query_start.size() == static_cast<size_t>(seqs + 1),
                   "inconsistent ForwardBatch: {} tokens, {} positions, {} slots, {} query starts for {} seqs", tokens,
                   b.positions.size(), b.slot_mapping.size(), b.query_start.size(), seqs);
    const size_t bytes = payload_bytes(tokens, seqs, tables, rows);
    send_header({kForward, tokens, seqs, b.max_blocks_per_seq, rows, static_cast<int64_t>(b.moe_exchange), tables,
                 static_cast<int64_t>(bytes)});
    std::vector<std::byte> payload(bytes);
    size_t at = 0;
    put(payload, at, b.token_ids);
    put(payload, at, b.positions);
    put(payload, at, b.slot_mapping);
    put(payload, at, b.query_start);
    put(payload, at, b.seq_lens);
    put(payload, at, b.block_tables);
    put(payload, at, b.logits_rows);
    if (bytes > 0) tp_.broadcast_bytes(std::span<std::byte>(payload), 0);
    return inner_.forward(b, kv);
}

void TpLeaderModel::keepalive() {
    if (std::chrono::steady_clock::now() - last_sent_ >= keepalive_) send_header({kNoop, 0, 0, 0, 0, 0, 0, 0});
}

void TpLeaderModel::shutdown() {
    try {
        send_header({kShutdown, 0, 0, 0, 0, 0, 0, 0});
    } catch (const Error&) {
        // the peers are gone already; nothing to tell them
    }
}

int run_tp_follower(model::Model& model, parallel::Communicator& tp, Logger& logger) {
    std::unique_ptr<model::KvCache> kv;
    std::vector<std::byte> payload;
    model::ForwardBatch b;
    int64_t forwards = 0;
    while (true) {
        Header h{};
        tp.broadcast(std::span<int64_t>(h), 0);
        switch (h[0]) {
            case kNoop:
                break;
            case kCreateKv:
                kv = model.create_kv_cache(h[1], h[2]);
                MOESERVE_LOG_I(logger, "engine", "TP follower: KV cache of %lld blocks of %lld tokens",
                               static_cast<long long>(h[1]), static_cast<long long>(h[2]));
                break;
            case kForward: {
                MOESERVE_CHECK(kv != nullptr, "TP follower got a forward before the KV cache was created");
                const int64_t tokens = h[1], seqs = h[2], rows = h[4], tables = h[6];
                MOESERVE_CHECK(static_cast<size_t>(h[7]) == payload_bytes(tokens, seqs, tables, rows),
                               "TP header announces {} payload bytes, the sizes need {}", h[7],
                               payload_bytes(tokens, seqs, tables, rows));
                payload.resize(static_cast<size_t>(h[7]));
                if (!payload.empty()) tp.broadcast_bytes(std::span<std::byte>(payload), 0);
                size_t at = 0;
                take(payload, at, b.token_ids, tokens);
                take(payload, at, b.positions, tokens);
                take(payload, at, b.slot_mapping, tokens);
                take(payload, at, b.query_start, seqs + 1);
                take(payload, at, b.seq_lens, seqs);
                take(payload, at, b.block_tables, tables);
                take(payload, at, b.logits_rows, rows);
                b.max_blocks_per_seq = h[3];
                b.moe_exchange = static_cast<parallel::MoeExchangeKind>(h[5]);
                model.forward(b, *kv);
                ++forwards;
                break;
            }
            case kShutdown:
                MOESERVE_LOG_I(logger, "engine", "TP follower: leader shut down after %lld forwards",
                               static_cast<long long>(forwards));
                return 0;
            default:
                raise(ErrorCode::kInvalidArgument, "TP follower: unknown header kind {} from the leader", h[0]);
        }
    }
}

}  // namespace moeserve::engine
