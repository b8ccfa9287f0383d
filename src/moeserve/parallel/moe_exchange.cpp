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

void MoeExchange::dispatch(Communicator& ep, MoeExchangeKind kind, const MoeTokens& t, int64_t experts_per_rank) {
    MOESERVE_CHECK(experts_per_rank > 0 && t.hidden > 0 && t.k > 0, "bad MoE exchange shape");
    kind_ = kind;
    hidden_ = t.hidden;
    k_ = t.k;
    num_tokens_ = t.num_tokens;
    width_ = hidden_ + 2 * k_;
    const auto size = static_cast<size_t>(ep.size());
    if (kind == MoeExchangeKind::kAllGather) {
        // 1. every rank's records, padded all-gather: [sum counts, width]
        send_.resize(static_cast<size_t>(t.num_tokens * width_));
        for (int64_t i = 0; i < t.num_tokens; ++i) pack(t, i, send_.data() + i * width_);
        all_gather_rows_padded(ep, send_, width_, recv_, counts_, padded_);
        unpack(recv_.data(), static_cast<int64_t>(recv_.size()) / width_);
        return;
    }
    // 1. rows for each destination rank, rank by rank: a token goes to every rank owning one of
    //    its k experts (once per rank)
    send_rows_.assign(size, 0);
    send_token_.clear();
    send_.clear();
    std::vector<char> wants(size);
    std::vector<std::vector<int32_t>> to(size);
    for (int64_t i = 0; i < t.num_tokens; ++i) {
        std::fill(wants.begin(), wants.end(), 0);
        for (int j = 0; j < k_; ++j) {
            const int64_t owner = t.topk_ids[i * k_ + j] / experts_per_rank;
            MOESERVE_CHECK(owner >= 0 && owner < static_cast<int64_t>(size), "expert {} has no owner in {} ranks",
                           t.topk_ids[i * k_ + j], size);
            wants[static_cast<size_t>(owner)] = 1;
        }
        for (size_t r = 0; r < size; ++r) {
            if (wants[r]) to[r].push_back(static_cast<int32_t>(i));
        }
    }
    for (size_t r = 0; r < size; ++r) {
        send_rows_[r] = static_cast<int64_t>(to[r].size());
        send_token_.insert(send_token_.end(), to[r].begin(), to[r].end());
    }
    send_.resize(send_token_.size() * static_cast<size_t>(width_));
    for (size_t i = 0; i < send_token_.size(); ++i) pack(t, send_token_[i], send_.data() + i * width_);
    // 2. row counts: [size] out -> [size] in
    recv_rows_.assign(size, 0);
    const std::vector<int64_t> ones(size, 1);
    ep.all_to_all_v<int64_t>(send_rows_, ones, recv_rows_, ones);
    // 3. records
    int64_t total = 0;
    std::vector<int64_t> send_elems(size), recv_elems(size);
    for (size_t r = 0; r < size; ++r) {
        send_elems[r] = send_rows_[r] * width_;
        recv_elems[r] = recv_rows_[r] * width_;
        total += recv_rows_[r];
    }
    recv_.resize(static_cast<size_t>(total * width_));
    ep.all_to_all_v<float>(send_, send_elems, recv_, recv_elems);
    unpack(recv_.data(), total);
}

void MoeExchange::combine(Communicator& ep, float* out) {
    const auto size = static_cast<size_t>(ep.size());
    const auto row = static_cast<size_t>(hidden_);
    if (kind_ == MoeExchangeKind::kAllGather) {
        // 1. partials [sum counts, hidden] -> padded [size, max, hidden]; 2. reduce-scatter -> [max, hidden]
        const int64_t max_rows = *std::max_element(counts_.begin(), counts_.end());
        padded_.assign(size * static_cast<size_t>(max_rows) * row, 0.0f);
        size_t src = 0;
        for (size_t r = 0; r < size; ++r) {
            const size_t n = static_cast<size_t>(counts_[r]) * row;
            if (n > 0)
                std::memcpy(padded_.data() + r * static_cast<size_t>(max_rows) * row, local_out_.data() + src,
                            n * sizeof(float));
            src += n;
        }
        recv_.resize(static_cast<size_t>(max_rows) * row);
        ep.reduce_scatter_sum(padded_, recv_);
        if (num_tokens_ > 0) std::memcpy(out, recv_.data(), static_cast<size_t>(num_tokens_) * row * sizeof(float));
        return;
    }
    // 1. partial rows back to their senders: [num_local, hidden] -> [sent rows, hidden]
    std::vector<int64_t> send_elems(size), recv_elems(size);
    for (size_t r = 0; r < size; ++r) {
        send_elems[r] = recv_rows_[r] * hidden_;
        recv_elems[r] = send_rows_[r] * hidden_;
    }
    recv_.resize(send_token_.size() * row);
    ep.all_to_all_v<float>(std::span<const float>(local_out_.data(), static_cast<size_t>(num_local_) * row), send_elems,
                           recv_, recv_elems);
    // 2. out[token] = sum of its partials, in rank order
    std::fill(out, out + static_cast<size_t>(num_tokens_) * row, 0.0f);
    for (size_t i = 0; i < send_token_.size(); ++i) {
        float* dst = out + static_cast<size_t>(send_token_[i]) * row;
        const float* p = recv_.data() + i * row;
        for (size_t j = 0; j < row; ++j) dst[j] += p[j];
    }
}

}  // namespace moeserve::parallel
