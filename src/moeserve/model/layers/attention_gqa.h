// Grouped-query attention with optional per-head q/k RMSNorm (Qwen3), RoPE, and a paged KV cache.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/cpu/paged_attention.h"
#include "moeserve/model/forward_batch.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/layers/rotary_embedding.h"

namespace moeserve::model {

struct GqaShape {
    int64_t hidden_size, num_heads, num_kv_heads, head_dim;
    bool qk_norm;     // Qwen3: RMSNorm over head_dim on q and k before RoPE
    bool bias;        // attention_bias on q/k/v
    double rms_norm_eps;
};

// Per-forward buffers, grown on demand and reused across layers and steps.
struct GqaScratch {
    std::vector<float> q, k, v, attn;
};

class GqaAttention {
public:
    // prefix: "model.layers.N.self_attn."
    static GqaAttention load(const io::WeightSource& weights, const std::string& prefix, const GqaShape& shape);

    // h f32 [T, hidden] -> out f32 [T, hidden]; writes this layer's K/V of the batch into kv.
    void forward(ThreadPool& pool, const float* h, const ForwardBatch& batch, const kernels::cpu::PagedKvLayer& kv,
                 const RotaryEmbedding& rope, GqaScratch& scratch, float* out) const;

    size_t weight_bytes() const;

private:
    GqaShape shape_{};
    Linear q_proj_, k_proj_, v_proj_, o_proj_;
    Tensor q_norm_, k_norm_;  // f32 [head_dim], when qk_norm
};

}  // namespace moeserve::model
