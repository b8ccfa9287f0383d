// The model's collective steps under a ParallelConfig: TP all-reduce of partial sums, the
// vocabulary-parallel embedding and lm_head, and routed experts split by EP (dispatch/combine) or
// by TP (moe_intermediate slices + all-reduce). Each is a no-op wrapper on a single rank.
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/buffer.h"
#include "moeserve/kernels/weight_types.h"
#include "moeserve/model/layers/experts.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/parallel_config.h"
#include "moeserve/parallel/moe_exchange.h"

namespace moeserve::model {

// data f32 [n] summed over the TP group (no-op when tp_size == 1).
void tp_all_reduce(const ParallelConfig& par, float* data, int64_t n);

// Expert ids this rank loads: all of them, or its EP shard. Error kInvalidArgument when the EP size
// does not divide num_experts.
ShardRange local_experts(const ParallelConfig& par, int64_t num_experts);
// moe_intermediate rows this rank loads: all (EP or single rank), or its TP slice.
ShardRange local_moe_inter(const ParallelConfig& par, int64_t moe_inter);

// Vocabulary-parallel embedding: this rank holds rows [vocab_shard) of the bf16 | f32 table, or,
// with gguf_shard set, of that GGUF matrix (each looked-up row dequantized; table_shard unused).
// ids [T] -> x f32 [T, hidden], all-reduced over TP (rows of other ranks' ids are zero here).
void embed_vocab_parallel(const ParallelConfig& par, const TensorView& table_shard, ShardRange vocab_shard,
                          int64_t hidden, const int32_t* ids, int64_t num_tokens, float* x,
                          const kernels::GgufMatrix* gguf_shard = nullptr);

// Buffers of compute_logits, reused across steps (they grow to the largest step, then no
// step allocates).
struct LogitsScratch {
    kernels::Buffer rows;       // f32 [R, hidden]
    kernels::Buffer local;      // TP: f32 [R, vocab_shard.count], this rank's logits
    kernels::Buffer gather;     // TP: f32 [tp][R, V_r], every rank's logits
    std::vector<size_t> bytes;  // TP: [tp] bytes of each rank's logits
    Tensor logits;              // f32 [>= R, vocab]
};

// Vocabulary-parallel lm_head: rows x f32 [R, hidden] through this rank's [vocab_shard.count,
// hidden] slice, gathered over TP into logits f32 [R, vocab]. Uses scratch's local, gather and
// bytes.
void lm_head_vocab_parallel(const ParallelConfig& par, ThreadPool& pool, const Linear& head_shard, int64_t vocab,
                            const float* x, int64_t rows, LogitsScratch& scratch, float* logits);

// The last step of every model: the final-normed hidden states hs f32 [T, hidden] at
// `rows` (indices into the batch) through the (vocabulary-parallel) lm_head. Returns logits
// f32 [rows.size(), vocab], a view into scratch valid until the next call.
TensorView compute_logits(const ParallelConfig& par, ThreadPool& pool, const Linear& head, int64_t vocab,
                          const float* hs, int64_t hidden, const std::vector<int32_t>& rows, LogitsScratch& scratch);

struct RoutedMoeArgs {
    const float* x = nullptr;  // f32 [num_tokens, hidden]
    int64_t num_tokens = 0;
    const int32_t* topk_ids = nullptr;    // [num_tokens, k], global ids
    const float* topk_weights = nullptr;  // [num_tokens, k]
    int k = 0;
    parallel::MoeExchangeKind exchange = parallel::MoeExchangeKind::kAllToAll;
};

// Routed experts of one layer for this rank. EP: dispatch to expert owners, run the local experts,
// combine (the exchange the step chose; debug_flip_moe_exchange flips it). TP-split experts: local
// partial sums, all-reduced over TP. out f32 [num_tokens, hidden] holds the full result.
// One per model. The padded all-gather exchanges the token counts only in the first MoE layer
// after begin_forward() and reuses them in the later ones (MoeExchange::begin_forward).
class ParallelMoe {
public:
    // The decoder calls this at the start of every forward and again before the first layer
    // whose row count differs from the previous layers' (its last layer keeps only the logits
    // rows): at the same layer on every rank, whatever this rank's own count, so the ranks'
    // collectives stay the same.
    void begin_forward() { exchange_.begin_forward(); }
    void forward(ThreadPool& pool, const Experts& experts, const ParallelConfig& par, const RoutedMoeArgs& args,
                 int64_t experts_per_rank, float* out);

private:
    parallel::MoeExchange exchange_;
};

}  // namespace moeserve::model
