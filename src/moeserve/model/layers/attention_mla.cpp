#include "moeserve/model/layers/attention_mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/int4_weights.h"
#include "moeserve/model/formats/modelslim.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

MlaAttention MlaAttention::load(const io::WeightSource& weights, const std::string& prefix, const MlaShape& s,
                                int tp_rank, int tp_size, const Quantization& quant) {
    if (s.num_heads % tp_size != 0) {
        raise(ErrorCode::kInvalidArgument, "num_attention_heads ({}) must be divisible by tensor-parallel-size ({})",
              s.num_heads, tp_size);
    }
    MlaAttention a;
    const int64_t heads = s.num_heads / tp_size;
    const int64_t h0 = tp_rank * heads;
    a.shape_ = s;
    a.shape_.num_heads = heads;
    const int64_t qk = s.qk_nope_head_dim + s.qk_rope_head_dim;
    if (s.q_lora_rank > 0) {
        a.q_a_proj_ = Linear::load(weights, prefix + "q_a_proj", s.q_lora_rank, s.hidden_size, s.bias, quant);
        a.q_a_norm_ = load_vector_f32(weights, prefix + "q_a_layernorm.weight", s.q_lora_rank);
        a.q_a_norm_bias_ = load_optional_vector_f32(weights, prefix + "q_a_layernorm.bias", s.q_lora_rank);
        check_fused_shards(weights, quant, {prefix + "q_a_proj", prefix + "kv_a_proj_with_mqa"});
        a.q_b_proj_ = Linear::load_shard(weights, prefix + "q_b_proj", s.num_heads * qk, s.q_lora_rank,
                                         {h0 * qk, heads * qk, 0, -1}, false, quant);
    } else {
        a.q_proj_ = Linear::load_shard(weights, prefix + "q_proj", s.num_heads * qk, s.hidden_size,
                                       {h0 * qk, heads * qk, 0, -1}, false, quant);
    }
    a.kv_a_proj_ = Linear::load(weights, prefix + "kv_a_proj_with_mqa", s.kv_lora_rank + s.qk_rope_head_dim,
                                s.hidden_size, s.bias, quant);
    a.kv_a_norm_ = load_vector_f32(weights, prefix + "kv_a_layernorm.weight", s.kv_lora_rank);
    a.kv_a_norm_bias_ = load_optional_vector_f32(weights, prefix + "kv_a_layernorm.bias", s.kv_lora_rank);
    const int64_t per_head = s.qk_nope_head_dim + s.v_head_dim;
    const int64_t kv_b_rows = s.num_heads * per_head;
    // absorbed into the attention in f32 / bf16 (decode), so never run in int8
    a.kv_b_proj_ =
        Linear::load_shard(weights, prefix + "kv_b_proj", kv_b_rows, s.kv_lora_rank,
                           {h0 * per_head, heads * per_head, 0, -1}, false, quant, LayerPrecision::kDequantized);
    if (stored_as_int4(weights, prefix + "kv_b_proj", quant)) {
        a.kv_b_owned_ = load_weight_f32(weights, prefix + "kv_b_proj", kv_b_rows, s.kv_lora_rank, quant);
        a.kv_b_w_ = a.kv_b_owned_.view();
    } else {
        a.kv_b_w_ = get_checked(weights, prefix + "kv_b_proj.weight", Shape{kv_b_rows, s.kv_lora_rank});
    }
    if (a.kv_b_w_.dtype != DType::kBF16 && a.kv_b_w_.dtype != DType::kF32) {
        a.kv_b_owned_ = load_dequantized_f32(weights, prefix + "kv_b_proj.weight", quant.block_rows, quant.block_cols);
        a.kv_b_w_ = a.kv_b_owned_.view();
    }
    a.kv_b_w_ = widen_to_f32_if(a.kv_b_w_, quant.f32_weights, a.kv_b_owned_);
    a.kv_b_w_ = a.kv_b_w_.rows(h0 * per_head, (h0 + heads) * per_head);
    // NOTE: o_proj's bias (if any) is added once: by TP rank 0 only, before the all-reduce.
    a.o_proj_ = Linear::load_shard(weights, prefix + "o_proj", s.hidden_size, s.num_heads * s.v_head_dim,
                                   {0, -1, h0 * s.v_head_dim, heads * s.v_head_dim}, s.bias && tp_rank == 0, quant);
    return a;
}

size_t MlaAttention::weight_bytes() const {
    return q_proj_.weight_bytes() + q_a_proj_.weight_bytes() + q_b_proj_.weight_bytes() + kv_a_proj_.weight_bytes() +
           kv_b_proj_.weight_bytes() + o_proj_.weight_bytes();
}

kernels::MlaKvB MlaAttention::kv_b() const {
    const bool bf16 = kv_b_w_.dtype == DType::kBF16;
    return {bf16 ? kv_b_w_.as<const uint16_t>() : nullptr,
            bf16 ? nullptr : kv_b_w_.as<const float>(),
            shape_.num_heads,
            shape_.qk_nope_head_dim,
            shape_.v_head_dim,
            shape_.kv_lora_rank};
}

void MlaAttention::forward(ThreadPool& pool, const float* h, const ForwardBatch& batch,
                           const kernels::PagedLatentLayer& kv, const RotaryEmbedding& rope, MlaPath path,
                           MlaScratch& s, float* out) const {
    const MlaShape& c = shape_;
    const int64_t t = batch.num_tokens(), heads = c.num_heads;
    const int64_t dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, r = c.kv_lora_rank;
    const int64_t qk = dn + dr, row = r + dr;
    const auto eps = static_cast<float>(c.lora_norm_eps);
    MOESERVE_CHECK(kv.kv_lora_rank == r && kv.rope_dim == dr, "latent cache [{}, {}] for a layer of [{}, {}]",
                   kv.kv_lora_rank, kv.rope_dim, r, dr);
    s.q.resize(static_cast<size_t>(t * heads * qk));
    s.kv_a.resize(static_cast<size_t>(t * row));
    s.latent.resize(static_cast<size_t>(t * r));
    s.attn.resize(static_cast<size_t>(t * heads * c.v_head_dim));
    float* q = s.q.data();
    float* kv_a = s.kv_a.data();

    // 1. queries: [T, hidden] -> q [T, H, nope + rope]
    if (c.q_lora_rank > 0) {
        s.q_a.resize(static_cast<size_t>(t * c.q_lora_rank));
        q_a_proj_.forward(pool, h, t, s.q_a.data());
        kernels::ops().rms_norm(pool, s.q_a.data(), q_a_norm_.as<float>(), t, c.q_lora_rank, eps, s.q_a.data());
        add_row_bias(q_a_norm_bias_, s.q_a.data(), t, c.q_lora_rank);
        q_b_proj_.forward(pool, s.q_a.data(), t, q);
    } else {
        q_proj_.forward(pool, h, t, q);
    }
    // 2. compressed kv: [T, hidden] -> [T, latent + k_pe]; RMSNorm on the latent part
    kv_a_proj_.forward(pool, h, t, kv_a);
    for (int64_t i = 0; i < t; ++i) std::copy_n(kv_a + i * row, r, s.latent.data() + i * r);
    kernels::ops().rms_norm(pool, s.latent.data(), kv_a_norm_.as<float>(), t, r, eps, s.latent.data());
    add_row_bias(kv_a_norm_bias_, s.latent.data(), t, r);
    for (int64_t i = 0; i < t; ++i) std::copy_n(s.latent.data() + i * r, r, kv_a + i * row);
    // 3. RoPE on q_pe (every head) and on the shared k_pe
    rope.apply(q + dn, t, heads, qk, heads * qk, batch.positions.data());
    rope.apply(kv_a + r, t, 1, row, row, batch.positions.data());
    // 4. cache the [latent, k_pe] rows, then attend per sequence -> attn [T, H, v]
    kernels::ops().write_latent(kv, kv_a, t, batch.slot_mapping.data());
    std::vector<int64_t> absorbed;
    for (int64_t seq = 0; seq < batch.num_seqs(); ++seq) {
        const int64_t q_len = batch.query_start[size_t(seq + 1)] - batch.query_start[size_t(seq)];
        if (q_len == 0) continue;
        const int64_t prefix = batch.seq_lens[size_t(seq)] - q_len;
        const MlaPath chosen = path == MlaPath::kAuto ? mla_auto_path(c, q_len, prefix) : path;
        if (chosen == MlaPath::kAbsorbed) {
            absorbed.push_back(seq);
        } else if (prefix > 0 && chosen == MlaPath::kSplit) {
            attend_split(pool, batch, seq, kv, s);
        } else {
            attend_expanded(pool, batch, seq, kv, s);
        }
    }
    if (!absorbed.empty()) attend_absorbed(pool, batch, absorbed, kv, s);
    // 5. [T, H * v] -> [T, hidden]
    o_proj_.forward(pool, s.attn.data(), t, out);
}

void MlaAttention::attend_absorbed(ThreadPool& pool, const ForwardBatch& batch, const std::vector<int64_t>& seqs,
                                   const kernels::PagedLatentLayer& kv, MlaScratch& s) const {
    const MlaShape& c = shape_;
    const int64_t heads = c.num_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, r = c.kv_lora_rank;
    const int64_t qk = dn + dr, row = r + dr, dv = c.v_head_dim, mb = batch.max_blocks_per_seq;
    // The absorbed sequences as a sub-batch: their token rows, query starts, lengths and tables.
    s.abs_rows.clear();
    s.abs_start.assign(1, 0);
    s.abs_lens.clear();
    s.abs_tables.clear();
    for (int64_t seq : seqs) {
        for (int32_t i = batch.query_start[size_t(seq)]; i < batch.query_start[size_t(seq + 1)]; ++i) {
            s.abs_rows.push_back(i);
        }
        s.abs_start.push_back(static_cast<int32_t>(s.abs_rows.size()));
        s.abs_lens.push_back(batch.seq_lens[size_t(seq)]);
        s.abs_tables.insert(s.abs_tables.end(), batch.block_tables.begin() + seq * mb,
                            batch.block_tables.begin() + (seq + 1) * mb);
    }
    const auto ta = static_cast<int64_t>(s.abs_rows.size());
    s.q_abs.resize(static_cast<size_t>(ta * heads * row));
    s.lat_out.resize(static_cast<size_t>(ta * heads * r));
    s.v_out.resize(static_cast<size_t>(ta * heads * dv));
    const kernels::MlaKvB w = kv_b();
    // 1. q_abs [Ta, H, latent + rope] = [q_nope W_UK, q_pe]
    const float* q = s.q.data();
    if (ta != batch.num_tokens()) {  // gather the sub-batch's query rows: [Ta, H, nope + rope]
        s.q_pad.resize(static_cast<size_t>(ta * heads * qk));
        for (int64_t a = 0; a < ta; ++a) {
            std::copy_n(s.q.data() + int64_t{s.abs_rows[size_t(a)]} * heads * qk, heads * qk,
                        s.q_pad.data() + a * heads * qk);
        }
        q = s.q_pad.data();
    }
    kernels::ops().mla_absorb_q(pool, w, q, ta, heads * qk, qk, s.q_abs.data(), heads * row, row);
    for (int64_t i = 0; i < ta * heads; ++i) std::copy_n(q + i * qk + dn, dr, s.q_abs.data() + i * row + r);
    // 2. attention in the latent space -> [Ta, H, latent]; 3. W_UV -> [Ta, H, v]
    const kernels::MlaAttentionArgs args{s.q_abs.data(),
                                         s.lat_out.data(),
                                         ta,
                                         heads,
                                         static_cast<int64_t>(seqs.size()),
                                         s.abs_start.data(),
                                         s.abs_lens.data(),
                                         s.abs_tables.data(),
                                         mb,
                                         static_cast<float>(c.softmax_scale)};
    kernels::ops().mla_attention(pool, kv, args);
    kernels::ops().mla_expand_v(pool, w, s.lat_out.data(), ta, s.v_out.data());
    for (int64_t a = 0; a < ta; ++a) {
        std::copy_n(s.v_out.data() + a * heads * dv, heads * dv,
                    s.attn.data() + int64_t{s.abs_rows[size_t(a)]} * heads * dv);
    }
}

void MlaAttention::attend_expanded(ThreadPool& pool, const ForwardBatch& batch, int64_t seq,
                                   const kernels::PagedLatentLayer& kv, MlaScratch& s) const {
    const int64_t heads = shape_.num_heads, dv = shape_.v_head_dim;
    const int64_t dp = std::max(shape_.qk_nope_head_dim + shape_.qk_rope_head_dim, dv);
    const int64_t q0 = batch.query_start[size_t(seq)];
    const int64_t q_len = batch.query_start[size_t(seq + 1)] - q0;
    attend_expanded_range(pool, batch, seq, 0, kv, s, nullptr);
    for (int64_t i = 0; i < q_len * heads; ++i)
        std::copy_n(s.o_pad.data() + i * dp, dv, s.attn.data() + (q0 * heads + i) * dv);
}

void MlaAttention::attend_expanded_range(ThreadPool& pool, const ForwardBatch& batch, int64_t seq, int64_t begin,
                                         const kernels::PagedLatentLayer& kv, MlaScratch& s, float* lse) const {
    const MlaShape& c = shape_;
    const int64_t heads = c.num_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, r = c.kv_lora_rank;
    const int64_t qk = dn + dr, row = r + dr, dv = c.v_head_dim;
    const int64_t dp = std::max(qk, dv);  // K and V padded with zeros to one head_dim
    const int64_t q0 = batch.query_start[size_t(seq)];
    const int64_t q_len = batch.query_start[size_t(seq + 1)] - q0;
    const int64_t len = batch.seq_lens[size_t(seq)] - begin;  // keys: positions [begin, seq_len)
    const int32_t* table = batch.block_tables.data() + seq * batch.max_blocks_per_seq;
    // 1. the cached latents of the range -> kv_b_proj -> [L, H, k_nope + v]
    s.latent.resize(static_cast<size_t>(std::max(len, batch.num_tokens()) * r));
    s.kv.resize(static_cast<size_t>(len * heads * (dn + dv)));
    s.rows.resize(static_cast<size_t>(len * row));
    kernels::ops().read_latent(kv, table, begin, begin + len,
                               s.rows.data());  // [L, latent + rope] f32 (from f32 or bf16)
    for (int64_t j = 0; j < len; ++j) std::copy_n(s.rows.data() + j * row, r, s.latent.data() + j * r);
    kv_b_proj_.forward(pool, s.latent.data(), len, s.kv.data());
    // 2. K [L, H, dp] = [k_nope, k_pe, 0], V [L, H, dp] = [v, 0], Q [q_len, H, dp] = [q, 0]
    s.k.assign(static_cast<size_t>(len * heads * dp), 0.0f);
    s.v.assign(static_cast<size_t>(len * heads * dp), 0.0f);
    for (int64_t j = 0; j < len; ++j) {
        const float* k_pe = s.rows.data() + j * row + r;
        for (int64_t hd = 0; hd < heads; ++hd) {
            const float* src = s.kv.data() + (j * heads + hd) * (dn + dv);
            float* k = s.k.data() + (j * heads + hd) * dp;
            std::copy_n(src, dn, k);
            std::copy_n(k_pe, dr, k + dn);
            std::copy_n(src + dn, dv, s.v.data() + (j * heads + hd) * dp);
        }
    }
    s.q_pad.assign(static_cast<size_t>(q_len * heads * dp), 0.0f);
    s.o_pad.resize(static_cast<size_t>(q_len * heads * dp));
    for (int64_t i = 0; i < q_len * heads; ++i)
        std::copy_n(s.q.data() + (q0 * heads + i) * qk, qk, s.q_pad.data() + i * dp);
    // 3. causal attention over one block holding the range (the queries are its last q_len rows)
    const kernels::PagedKvLayer layer{s.k.data(), s.v.data(), 1, len, heads, dp};
    const int32_t local_start[2] = {0, static_cast<int32_t>(q_len)};
    const int32_t local_len = static_cast<int32_t>(len);
    const int32_t local_table = 0;
    kernels::PagedAttentionArgs args{
        s.q_pad.data(), s.o_pad.data(), q_len,        heads, 1,
        local_start,    &local_len,     &local_table, 1,     static_cast<float>(c.softmax_scale)};
    args.lse = lse;
    kernels::ops().paged_attention(pool, layer, args);
}

// The chunk's queries attend (a) the cached prefix [0, P) in the absorbed form, every query all
// of it, and (b) their own chunk [P, len) expanded and causal. softmax over the union of the two
// key sets = the two partial outputs weighted by exp(lse_a - m) and exp(lse_b - m), normalized.
void MlaAttention::attend_split(ThreadPool& pool, const ForwardBatch& batch, int64_t seq,
                                const kernels::PagedLatentLayer& kv, MlaScratch& s) const {
    const MlaShape& c = shape_;
    const int64_t heads = c.num_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, r = c.kv_lora_rank;
    const int64_t qk = dn + dr, row = r + dr, dv = c.v_head_dim, dp = std::max(qk, dv);
    const int64_t q0 = batch.query_start[size_t(seq)];
    const int64_t q_len = batch.query_start[size_t(seq + 1)] - q0;
    const int64_t prefix = batch.seq_lens[size_t(seq)] - q_len;
    MOESERVE_CHECK(prefix > 0, "attend_split without a cached prefix");
    // (b) the chunk itself: o_pad [q_len, H, dp], lse_chunk
    s.lse_chunk.resize(static_cast<size_t>(q_len * heads));
    attend_expanded_range(pool, batch, seq, prefix, kv, s, s.lse_chunk.data());
    // (a) the prefix, absorbed: q_abs [q_len, H, latent + rope] -> lat_out [q_len, H, latent] -> v_out
    s.q_abs.resize(static_cast<size_t>(q_len * heads * row));
    s.lat_out.resize(static_cast<size_t>(q_len * heads * r));
    s.v_out.resize(static_cast<size_t>(q_len * heads * dv));
    s.lse_prefix.resize(static_cast<size_t>(q_len * heads));
    const kernels::MlaKvB w = kv_b();
    const float* q = s.q.data() + q0 * heads * qk;
    kernels::ops().mla_absorb_q(pool, w, q, q_len, heads * qk, qk, s.q_abs.data(), heads * row, row);
    for (int64_t i = 0; i < q_len * heads; ++i) std::copy_n(q + i * qk + dn, dr, s.q_abs.data() + i * row + r);
    const int32_t start[2] = {0, static_cast<int32_t>(q_len)};
    const int32_t prefix_len = static_cast<int32_t>(prefix);
    kernels::MlaAttentionArgs args{s.q_abs.data(),
                                   s.lat_out.data(),
                                   q_len,
                                   heads,
                                   1,
                                   start,
                                   &prefix_len,
                                   batch.block_tables.data() + seq * batch.max_blocks_per_seq,
                                   batch.max_blocks_per_seq,
                                   static_cast<float>(c.softmax_scale)};
    args.lse = s.lse_prefix.data();
    args.causal = false;
    kernels::ops().mla_attention(pool, kv, args);
    kernels::ops().mla_expand_v(pool, w, s.lat_out.data(), q_len, s.v_out.data());
    // merge
    for (int64_t i = 0; i < q_len * heads; ++i) {
        const float la = s.lse_prefix[size_t(i)], lb = s.lse_chunk[size_t(i)], m = std::max(la, lb);
        const float wa = std::exp(la - m), wb = std::exp(lb - m), inv = 1.0f / (wa + wb);
        const float* va = s.v_out.data() + i * dv;
        const float* vb = s.o_pad.data() + i * dp;
        float* o = s.attn.data() + (q0 * heads + i) * dv;
        for (int64_t x = 0; x < dv; ++x) o[x] = (wa * va[x] + wb * vb[x]) * inv;
    }
}

namespace {

// Multiply-adds per head of one chunk of q_len tokens after `prefix` cached ones, in each form.
struct MlaCosts {
    double absorbed, expanded, split;
};

MlaCosts mla_costs(const MlaShape& c, int64_t q_len, int64_t prefix) {
    const int64_t r = c.kv_lora_rank, dr = c.qk_rope_head_dim, dn = c.qk_nope_head_dim, dv = c.v_head_dim;
    const int64_t dp = std::max(dn + dr, dv), len = prefix + q_len;
    const double q = double(q_len), uk_uv = double(r * (dn + dv));
    MlaCosts k{};
    // absorbed: W_UK / W_UV on the queries, scores over latent + rope and sums over the latent of
    // every cached row
    k.absorbed = q * uk_uv + q * double(len) * double(2 * r + dr);
    // expanded: kv_b_proj over every row, scores + weighted sums over dp-wide heads
    k.expanded = double(len) * uk_uv + q * double(len) * double(2 * dp);
    // split: kv_b_proj over the chunk, its own attention, W_UK / W_UV on the queries, and the
    // absorbed attention over the prefix
    k.split = q * uk_uv + q * q * double(2 * dp) + q * uk_uv + q * double(prefix) * double(2 * r + dr);
    return k;
}

}  // namespace

bool mla_split_is_cheaper(const MlaShape& c, int64_t q_len, int64_t prefix) {
    if (prefix <= 0) return false;
    const MlaCosts k = mla_costs(c, q_len, prefix);
    return k.split < k.expanded;
}

MlaPath mla_auto_path(const MlaShape& c, int64_t q_len, int64_t prefix) {
    if (q_len == 1) return MlaPath::kAbsorbed;
    const MlaCosts k = mla_costs(c, q_len, prefix);
    const bool split = mla_split_is_cheaper(c, q_len, prefix);
    if (k.absorbed <= (split ? k.split : k.expanded)) return MlaPath::kAbsorbed;
    return split ? MlaPath::kSplit : MlaPath::kExpanded;
}

}  // namespace moeserve::model
