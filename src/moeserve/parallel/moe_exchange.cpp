// MoE dispatch/combine by all-to-all-v or by padded all-gather + reduce-scatter (moe_exchange.h).
#include "moeserve/parallel/moe_exchange.h"

#include <algorithm>
#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/parallel/gather.h"

namespace moeserve::parallel {

const char* moe_exchange_name(MoeExchangeKind kind) {
    return kind == MoeExchangeKind::kAllToAll ? "all_to_all" : "all_gather";
}

// Record of one token: [hidden floats of x][k ids, bit-cast][k weights].
void MoeExchange::pack(const MoeTokens& t, int64_t token, float* dst) const {
    std::memcpy(dst, t.x + token * hidden_, static_cast<size_t>(hidden_) * sizeof(float));
    std::memcpy(dst + hidden_, t.topk_ids + token * k_, static_cast<size_t>(k_) * sizeof(int32_t));
    std::memcpy(dst + hidden_ + k_, t.topk_weights + token * k_, static_cast<size_t>(k_) * sizeof(float));
}

void MoeExchange::unpack(const float* records, int64_t n) {
    num_local_ = n;
    local_x_.resize(static_cast<size_t>(std::max<int64_t>(n, 1) * hidden_));
    local_ids_.resize(static_cast<size_t>(std::max<int64_t>(n, 1) * k_));
    local_w_.resize(static_cast<size_t>(std::max<int64_t>(n, 1) * k_));
    local_out_.resize(static_cast<size_t>(std::max<int64_t>(n, 1) * hidden_));
    for (int64_t i = 0; i < n; ++i) {
        const float* r = records + i * width_;
        std::memcpy(local_x_.data() + i * hidden_, r, static_cast<size_t>(hidden_) * sizeof(float));
        std::memcpy(local_ids_.data() + i * k_, r + hidden_, static_cast<size_t>(k_) * sizeof(int32_t));
        std::memcpy(local_w_.data() + i * k_, r + hidden_ + k_, static_cast<size_t>(k_) * sizeof(float));
    }
}

void MoeExchange::begin_forward() {
    per_forward_ = true;
    counts_valid_ = false;
}

void MoeExchange::dispatch(Communicator& ep, MoeExchangeKind kind, const MoeTokens& t, int64_t experts_per_rank) {
    MOESERVE_CHECK(experts_per_rank > 0 && t.hidden > 0 && t.k > 0, "bad MoE exchange shape");
    kind_ = kind;
    hidden_ = t.hidden;
    k_ = t.k;
    num_tokens_ = t.num_tokens;
    width_ = hidden_ + 2 * k_;
    const auto size = static_cast<size_t>(ep.size());
    if (kind == MoeExchangeKind::kAllGather) {
        // 1. every rank's records, padded all-gather: [sum counts, width]; the counts once per forward
        send_.resize(static_cast<size_t>(t.num_tokens * width_));
        for (int64_t i = 0; i < t.num_tokens; ++i) pack(t, i, send_.data() + i * width_);
        if (counts_valid_) {
            MOESERVE_CHECK(counts_[static_cast<size_t>(ep.rank())] == t.num_tokens,
                           "MoE exchange: {} tokens in a later layer of a forward that began with {} (call "
                           "begin_forward() at the start of every forward)",
                           t.num_tokens, counts_[static_cast<size_t>(ep.rank())]);
            all_gather_rows_padded_known(ep, send_, width_, counts_, recv_, gather_);
        } else {
            all_gather_rows_padded(ep, send_, width_, recv_, counts_, gather_);
            counts_valid_ = per_forward_;
        }
        unpack(recv_.data(), static_cast<int64_t>(recv_.size()) / width_);
        return;
    }
    // 1. rows for each destination rank, rank by rank, tokens in order within a rank: a token goes
    //    to every rank owning one of its k experts (once per rank). Counted first, then placed.
    send_rows_.assign(size, 0);
    owners_.resize(static_cast<size_t>(t.num_tokens * k_));
    for (int64_t i = 0; i < t.num_tokens; ++i) {
        int32_t* own = owners_.data() + i * k_;
        for (int j = 0; j < k_; ++j) {
            const int64_t owner = t.topk_ids[i * k_ + j] / experts_per_rank;
            MOESERVE_CHECK(owner >= 0 && owner < static_cast<int64_t>(size), "expert {} has no owner in {} ranks",
                           t.topk_ids[i * k_ + j], size);
            own[j] = static_cast<int32_t>(std::find(own, own + j, owner) == own + j ? owner : -1);
            if (own[j] >= 0) ++send_rows_[static_cast<size_t>(owner)];
        }
    }
    fill_.resize(size);
    int64_t sent = 0;
    for (size_t r = 0; r < size; ++r) {
        fill_[r] = sent;
        sent += send_rows_[r];
    }
    send_token_.resize(static_cast<size_t>(sent));
    for (int64_t i = 0; i < t.num_tokens; ++i) {
        for (int j = 0; j < k_; ++j) {
            const int32_t owner = owners_[static_cast<size_t>(i * k_ + j)];
            if (owner >= 0)
                send_token_[static_cast<size_t>(fill_[static_cast<size_t>(owner)]++)] = static_cast<int32_t>(i);
        }
    }
    send_.resize(send_token_.size() * static_cast<size_t>(width_));
    for (size_t i = 0; i < send_token_.size(); ++i) pack(t, send_token_[i], send_.data() + i * width_);
    // 2. row counts: [size] out -> [size] in
    recv_rows_.assign(size, 0);
    ones_bytes_.assign(size, sizeof(int64_t));
    ep.all_to_all_v_bytes(std::as_bytes(std::span<const int64_t>(send_rows_)), ones_bytes_,
                          std::as_writable_bytes(std::span<int64_t>(recv_rows_)), ones_bytes_);
    // 3. records
    int64_t total = 0;
    send_bytes_.resize(size);
    recv_bytes_.resize(size);
    for (size_t r = 0; r < size; ++r) {
        send_bytes_[r] = static_cast<size_t>(send_rows_[r] * width_) * sizeof(float);
        recv_bytes_[r] = static_cast<size_t>(recv_rows_[r] * width_) * sizeof(float);
        total += recv_rows_[r];
    }
    recv_.resize(static_cast<size_t>(total * width_));
    ep.all_to_all_v_bytes(std::as_bytes(std::span<const float>(send_)), send_bytes_,
                          std::as_writable_bytes(std::span<float>(recv_)), recv_bytes_);
    unpack(recv_.data(), total);
}

void MoeExchange::combine(Communicator& ep, float* out) {
    const auto size = static_cast<size_t>(ep.size());
    const auto row = static_cast<size_t>(hidden_);
    if (kind_ == MoeExchangeKind::kAllGather) {
        // 1. partials [sum counts, hidden] -> padded [size, max, hidden] (the gather's buffer, free
        //    again); 2. reduce-scatter -> [max, hidden]
        const int64_t max_rows = *std::max_element(counts_.begin(), counts_.end());
        std::vector<float>& padded = gather_.padded;
        padded.assign(size * static_cast<size_t>(max_rows) * row, 0.0f);
        size_t src = 0;
        for (size_t r = 0; r < size; ++r) {
            const size_t n = static_cast<size_t>(counts_[r]) * row;
            if (n > 0)
                std::memcpy(padded.data() + r * static_cast<size_t>(max_rows) * row, local_out_.data() + src,
                            n * sizeof(float));
            src += n;
        }
        recv_.resize(static_cast<size_t>(max_rows) * row);
        ep.reduce_scatter_sum(padded, recv_);
        if (num_tokens_ > 0) std::memcpy(out, recv_.data(), static_cast<size_t>(num_tokens_) * row * sizeof(float));
        return;
    }
    // 1. partial rows back to their senders: [num_local, hidden] -> [sent rows, hidden]
    for (size_t r = 0; r < size; ++r) {
        send_bytes_[r] = static_cast<size_t>(recv_rows_[r]) * row * sizeof(float);
        recv_bytes_[r] = static_cast<size_t>(send_rows_[r]) * row * sizeof(float);
    }
    recv_.resize(send_token_.size() * row);
    ep.all_to_all_v_bytes(
        std::as_bytes(std::span<const float>(local_out_.data(), static_cast<size_t>(num_local_) * row)), send_bytes_,
        std::as_writable_bytes(std::span<float>(recv_)), recv_bytes_);
    // 2. out[token] = sum of its partials, in rank order
    std::fill(out, out + static_cast<size_t>(num_tokens_) * row, 0.0f);
    for (size_t i = 0; i < send_token_.size(); ++i) {
        float* dst = out + static_cast<size_t>(send_token_[i]) * row;
        const float* p = recv_.data() + i * row;
        for (size_t j = 0; j < row; ++j) dst[j] += p[j];
    }
}

}  // namespace moeserve::parallel
