// Grouped-query attention with optional per-head q/k RMSNorm (Qwen3), biases, attention sinks and
// a sliding window (gpt-oss), RoPE, and a paged KV cache.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/attention_types.h"
#include "moeserve/kernels/buffer.h"
#include "moeserve/model/forward_batch.h"
#include "moeserve/model/kv_cache.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/layers/rotary_embedding.h"

namespace moeserve::model {

struct GqaShape {
    int64_t hidden_size, num_heads, num_kv_heads, head_dim;
    bool qk_norm;  // Qwen3: RMSNorm over head_dim on q and k before RoPE
    bool bias;     // attention_bias on q/k/v
    double rms_norm_eps;
    bool o_bias = false;  // gpt-oss: o_proj has a bias too
    bool sinks = false;   // gpt-oss: a learned sink logit per head ("sinks" [num_heads])
};

// Per-forward buffers, grown on demand and reused across layers and steps.
struct GqaScratch {
    kernels::Buffer q, k, v, attn;
};

class GqaAttention {
public:
    // prefix: "model.layers.N.self_attn.". Tensor parallelism (tp_size > 1): this rank keeps heads
    // [tp_rank * H/tp, +H/tp) (q/k/v column-parallel, o_proj row-parallel: forward() then returns
    // a partial sum the caller all-reduces over TP). KV heads: KV/tp per rank when tp divides KV,
    // else (tp a multiple of KV) the one KV head its q heads use, replicated. Other head counts
    // are Error kInvalidArgument.
    // quant: which projections run W8A8 int8 (see Quantization::int8_module). window > 0: this
    // layer attends the last `window` positions only (kernels::PagedAttentionArgs::window).
    static GqaAttention load(const io::WeightSource& weights, const std::string& prefix, const GqaShape& shape,
                             int tp_rank = 0, int tp_size = 1, const Quantization& quant = {}, int64_t window = 0);
    // The shape this rank holds (heads and KV heads local).
    const GqaShape& shape() const { return shape_; }
    // KV heads one rank of tp_size holds (see load()).
    static int64_t local_kv_heads(const GqaShape& shape, int tp_size);
    // The model's KV heads TP rank tp_rank holds (its K/V projection rows and its KV cache).
    static KvSlice kv_heads(const GqaShape& shape, int tp_rank, int tp_size);

    // h f32 [T, hidden] -> out f32 [T, hidden]; writes this layer's K/V of the batch into kv.
    void forward(ThreadPool& pool, const float* h, const ForwardBatch& batch, const kernels::PagedKvLayer& kv,
                 const RotaryEmbedding& rope, GqaScratch& scratch, float* out) const;

    size_t weight_bytes() const;

private:
    GqaShape shape_{};
    Linear q_proj_, k_proj_, v_proj_, o_proj_;
    Tensor q_norm_, k_norm_;  // f32 [head_dim], when qk_norm
    Tensor sinks_;            // f32 [local heads], when sinks
    int64_t window_ = 0;
};

}  // namespace moeserve::model
