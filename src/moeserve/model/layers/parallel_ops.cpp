// Collective steps of the sharded model (parallel_ops.h).
#include "moeserve/model/layers/parallel_ops.h"

#include <algorithm>
#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/kernels/backend.h"
#include "moeserve/kernels/ops.h"

namespace moeserve::model {

void tp_all_reduce(const ParallelConfig& par, float* data, int64_t n) {
    if (par.tp_size == 1) return;
    par.tp->all_reduce_sum(std::span<float>(data, static_cast<size_t>(n)));
}

ShardRange local_experts(const ParallelConfig& par, int64_t num_experts) {
    if (par.ep_size == 1) return {0, num_experts};
    if (num_experts % par.ep_size != 0) {
        raise(ErrorCode::kInvalidArgument, "the expert-parallel size ({}) must divide the number of experts ({})",
              par.ep_size, num_experts);
    }
    return shard_range(num_experts, par.ep_size, par.ep_rank);
}

ShardRange local_moe_inter(const ParallelConfig& par, int64_t moe_inter) {
    if (par.ep_size > 1 || par.tp_size == 1) return {0, moe_inter};
    if (moe_inter % par.tp_size != 0) {
        raise(ErrorCode::kInvalidArgument,
              "moe_intermediate_size ({}) must be divisible by tensor-parallel-size ({}) when experts are split "
              "TP-wise (or enable expert parallelism)",
              moe_inter, par.tp_size);
    }
    return shard_range(moe_inter, par.tp_size, par.tp_rank);
}

void embed_vocab_parallel(const ParallelConfig& par, const TensorView& table, ShardRange vocab, int64_t hidden,
                          const int32_t* ids, int64_t num_tokens, float* x, const kernels::GgufMatrix* gguf_shard) {
    auto lookup = [&](const int32_t* rows, int64_t n, float* dst) {
        if (gguf_shard != nullptr) {
            kernels::ops().gguf_embedding(*gguf_shard, rows, n, dst);
        } else if (table.dtype == DType::kF32) {
            kernels::ops().embedding_f32(table.as<const float>(), vocab.count, hidden, rows, n, dst);
        } else {
            kernels::ops().embedding_bf16(table.as<const uint16_t>(), vocab.count, hidden, rows, n, dst);
        }
    };
    if (par.tp_size == 1) {
        lookup(ids, num_tokens, x);
        return;
    }
    // 1. rows of ids this rank holds; zeros elsewhere; 2. sum over TP gives every row once
    std::fill(x, x + num_tokens * hidden, 0.0f);
    for (int64_t t = 0; t < num_tokens; ++t) {
        const int32_t local = static_cast<int32_t>(ids[t] - vocab.begin);
        if (local < 0 || local >= vocab.count) continue;
        lookup(&local, 1, x + t * hidden);
    }
    tp_all_reduce(par, x, num_tokens * hidden);
}

void lm_head_vocab_parallel(const ParallelConfig& par, ThreadPool& pool, const Linear& head, int64_t vocab,
                            const float* x, int64_t rows, LogitsScratch& scratch, float* logits) {
    if (par.tp_size == 1) {
        head.forward(pool, x, rows, logits);
        return;
    }
    // 1. local logits [R, V_r]; 2. all-gather [tp][R, V_r]; 3. transpose to [R, V]
    const int64_t local = head.out_features();
    scratch.local.resize(static_cast<size_t>(std::max<int64_t>(rows * local, 1)));
    head.forward(pool, x, rows, scratch.local.data());
    scratch.bytes.resize(static_cast<size_t>(par.tp_size));
    for (int r = 0; r < par.tp_size; ++r)
        scratch.bytes[static_cast<size_t>(r)] =
            static_cast<size_t>(rows * shard_range(vocab, par.tp_size, r).count) * sizeof(float);
    scratch.gather.resize(static_cast<size_t>(rows * vocab));
    par.tp->all_gather_v_bytes(
        std::as_bytes(std::span<const float>(scratch.local.data(), static_cast<size_t>(rows * local))), scratch.bytes,
        std::as_writable_bytes(std::span<float>(scratch.gather)));
    size_t off = 0;
    for (int r = 0; r < par.tp_size; ++r) {
        const ShardRange s = shard_range(vocab, par.tp_size, r);
        for (int64_t i = 0; i < rows; ++i) {
            std::memcpy(logits + i * vocab + s.begin, scratch.gather.data() + off + static_cast<size_t>(i * s.count),
                        static_cast<size_t>(s.count) * sizeof(float));
        }
        off += static_cast<size_t>(rows * s.count);
    }
}

void ParallelMoe::forward(ThreadPool& pool, const Experts& experts, const ParallelConfig& par, const RoutedMoeArgs& a,
                          int64_t experts_per_rank, float* out) {
    const int64_t hidden = experts.hidden();
    if (par.ep_size == 1) {
        if (a.num_tokens > 0) {
            experts.forward(pool, a.x, a.num_tokens, a.topk_ids, a.topk_weights, a.k, out);
        }
        tp_all_reduce(par, out, a.num_tokens * hidden);  // TP-split experts: partial sums
        return;
    }
    parallel::MoeExchangeKind kind = a.exchange;
    if (par.debug_flip_moe_exchange) {
        kind = kind == parallel::MoeExchangeKind::kAllToAll ? parallel::MoeExchangeKind::kAllGather
                                                            : parallel::MoeExchangeKind::kAllToAll;
    }
    // 1. dispatch rows to the EP ranks owning their experts; 2. local experts; 3. combine
    exchange_.dispatch(*par.ep, kind, {a.x, a.topk_ids, a.topk_weights, a.num_tokens, hidden, a.k}, experts_per_rank);
    if (exchange_.num_local() > 0) {
        experts.forward(pool, exchange_.local_x(), exchange_.num_local(), exchange_.local_ids(),
                        exchange_.local_weights(), a.k, exchange_.local_out());
    }
    exchange_.combine(*par.ep, out);
}

TensorView compute_logits(const ParallelConfig& par, ThreadPool& pool, const Linear& head, int64_t vocab,
                          const float* hs, int64_t hidden, const std::vector<int32_t>& rows, LogitsScratch& scratch) {
    const auto r = static_cast<int64_t>(rows.size());
    scratch.rows.resize(static_cast<size_t>(std::max<int64_t>(r, 1) * hidden));
    for (int64_t j = 0; j < r; ++j) {
        std::copy_n(hs + rows[static_cast<size_t>(j)] * hidden, hidden, scratch.rows.data() + j * hidden);
    }
    if (scratch.logits.numel() < r * vocab) {
        scratch.logits = kernels::active_backend().allocate(DType::kF32, {std::max<int64_t>(r, 1), vocab});
    }
    lm_head_vocab_parallel(par, pool, head, vocab, scratch.rows.data(), r, scratch, scratch.logits.as<float>());
    return TensorView{scratch.logits.data(), DType::kF32, Shape{r, vocab}};
}

}  // namespace moeserve::model
