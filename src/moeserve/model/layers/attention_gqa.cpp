#include "moeserve/model/layers/attention_gqa.h"

#include <algorithm>
#include <cmath>

#include "moeserve/core/error.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/modelslim.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

int64_t GqaAttention::local_kv_heads(const GqaShape& s, int tp) {
    if (s.num_heads % tp != 0) {
        raise(ErrorCode::kInvalidArgument, "num_attention_heads ({}) must be divisible by tensor-parallel-size ({})",
              s.num_heads, tp);
    }
    if (s.num_kv_heads % tp == 0) return s.num_kv_heads / tp;
    if (tp % s.num_kv_heads == 0) return 1;  // replicated
    raise(ErrorCode::kInvalidArgument, "num_key_value_heads ({}) and tensor-parallel-size ({}) must divide one another",
          s.num_kv_heads, tp);
}

KvSlice GqaAttention::kv_heads(const GqaShape& s, int tp_rank, int tp_size) {
    const int64_t kv_local = local_kv_heads(s, tp_size);
    const int64_t q_begin = tp_rank * (s.num_heads / tp_size);
    // the KV head of q head h is h / (H / KV); replicated KV heads follow the rank's q heads
    const int64_t kv_begin =
        s.num_kv_heads % tp_size == 0 ? tp_rank * kv_local : q_begin / (s.num_heads / s.num_kv_heads);
    return {kv_begin, kv_local, s.num_kv_heads};
}

GqaAttention GqaAttention::load(const io::WeightSource& weights, const std::string& prefix, const GqaShape& s,
                                int tp_rank, int tp_size, const Quantization& quant, int64_t window) {
    GqaAttention a;
    const KvSlice kv = kv_heads(s, tp_rank, tp_size);
    const int64_t kv_local = kv.count, kv_begin = kv.first;
    const int64_t heads_local = s.num_heads / tp_size;
    const int64_t q_begin = tp_rank * heads_local;
    const int64_t q_dim = s.num_heads * s.head_dim;
    const int64_t kv_dim = s.num_kv_heads * s.head_dim;
    const int64_t d = s.head_dim;
    check_fused_shards(weights, quant, {prefix + "q_proj", prefix + "k_proj", prefix + "v_proj"});
    a.shape_ = s;
    a.shape_.num_heads = heads_local;
    a.shape_.num_kv_heads = kv_local;
    a.q_proj_ = Linear::load_shard(weights, prefix + "q_proj", q_dim, s.hidden_size,
                                   {q_begin * d, heads_local * d, 0, -1}, s.bias, quant);
    a.k_proj_ = Linear::load_shard(weights, prefix + "k_proj", kv_dim, s.hidden_size,
                                   {kv_begin * d, kv_local * d, 0, -1}, s.bias, quant);
    a.v_proj_ = Linear::load_shard(weights, prefix + "v_proj", kv_dim, s.hidden_size,
                                   {kv_begin * d, kv_local * d, 0, -1}, s.bias, quant);
    a.o_proj_ = Linear::load_shard(weights, prefix + "o_proj", s.hidden_size, q_dim,
                                   {0, -1, q_begin * d, heads_local * d}, s.o_bias && tp_rank == 0, quant);
    if (s.qk_norm) {
        a.q_norm_ = load_vector_f32(weights, prefix + "q_norm.weight", s.head_dim);
        a.k_norm_ = load_vector_f32(weights, prefix + "k_norm.weight", s.head_dim);
    }
    if (s.sinks) {
        const Tensor all = load_vector_f32(weights, prefix + "sinks", s.num_heads);
        a.sinks_ = Tensor(DType::kF32, {heads_local});
        std::copy_n(all.as<float>() + q_begin, heads_local, a.sinks_.as<float>());
    }
    a.window_ = window;
    return a;
}

size_t GqaAttention::weight_bytes() const {
    return q_proj_.weight_bytes() + k_proj_.weight_bytes() + v_proj_.weight_bytes() + o_proj_.weight_bytes();
}

void GqaAttention::forward(ThreadPool& pool, const float* h, const ForwardBatch& batch, const kernels::PagedKvLayer& kv,
                           const RotaryEmbedding& rope, GqaScratch& scratch, float* out) const {
    const GqaShape& s = shape_;
    const int64_t t = batch.num_tokens();
    const int64_t q_dim = s.num_heads * s.head_dim;
    const int64_t kv_dim = s.num_kv_heads * s.head_dim;
    scratch.q.resize(static_cast<size_t>(t * q_dim));
    scratch.k.resize(static_cast<size_t>(t * kv_dim));
    scratch.v.resize(static_cast<size_t>(t * kv_dim));
    scratch.attn.resize(static_cast<size_t>(t * q_dim));
    float* q = scratch.q.data();
    float* k = scratch.k.data();
    float* v = scratch.v.data();

    // 1. [T, hidden] -> q [T, H*D], k/v [T, KV*D]
    q_proj_.forward(pool, h, t, q);
    k_proj_.forward(pool, h, t, k);
    v_proj_.forward(pool, h, t, v);
    // 2. per-head RMSNorm over D: [T*H, D] and [T*KV, D]
    if (s.qk_norm) {
        kernels::ops().rms_norm(pool, q, q_norm_.as<float>(), t * s.num_heads, s.head_dim,
                                static_cast<float>(s.rms_norm_eps), q);
        kernels::ops().rms_norm(pool, k, k_norm_.as<float>(), t * s.num_kv_heads, s.head_dim,
                                static_cast<float>(s.rms_norm_eps), k);
    }
    // 3. RoPE on q and k at the tokens' positions
    rope.apply(q, t, s.num_heads, s.head_dim, q_dim, batch.positions.data());
    rope.apply(k, t, s.num_kv_heads, s.head_dim, kv_dim, batch.positions.data());
    // 4. K/V into the paged cache, then causal attention over each sequence's cached tokens
    kernels::ops().write_kv(kv, k, v, t, batch.slot_mapping.data());
    kernels::PagedAttentionArgs args{q,
                                     scratch.attn.data(),
                                     t,
                                     s.num_heads,
                                     batch.num_seqs(),
                                     batch.query_start.data(),
                                     batch.seq_lens.data(),
                                     batch.block_tables.data(),
                                     batch.max_blocks_per_seq,
                                     static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))};
    args.sinks = sinks_.empty() ? nullptr : sinks_.as<const float>();
    args.window = window_;
    kernels::ops().paged_attention(pool, kv, args);
    // 5. [T, H*D] -> [T, hidden]
    o_proj_.forward(pool, scratch.attn.data(), t, out);
}

}  // namespace moeserve::model
