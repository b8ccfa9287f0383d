// The reference backend's ops table. Most entries are the CPU kernels' scalar references with
// the thread pool dropped; the ops that have none (the fused residual norm, the embeddings, the
// GGUF linear and experts) are written here in scalar code from their documented semantics.
// The KV cache writes and the latent read only convert, exactly (their vector code gives the
// scalar code's bits), and routing and the load-time conversions are scalar already: the CPU
// backend's functions serve both there.
#include "moeserve/kernels/reference/backend.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/bf16_panels.h"
#include "moeserve/kernels/cpu/gguf_dequant.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/cpu/gguf_packed.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"
#include "moeserve/kernels/cpu/linear.h"
#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/linear_int8_static.h"
#include "moeserve/kernels/cpu/mla_attention.h"
#include "moeserve/kernels/cpu/moe_experts.h"
#include "moeserve/kernels/cpu/moe_experts_int4.h"
#include "moeserve/kernels/cpu/moe_experts_int8.h"
#include "moeserve/kernels/cpu/norm.h"
#include "moeserve/kernels/cpu/paged_attention.h"
#include "moeserve/kernels/cpu/quantize_int8.h"
#include "moeserve/kernels/cpu/rope.h"
#include "moeserve/kernels/cpu/routing.h"
#include "moeserve/kernels/cpu/routing_grouped.h"

namespace moeserve::kernels::reference {
namespace {

void rms_norm(ThreadPool&, const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out) {
    cpu::rms_norm_ref(x, weight, rows, dim, eps, out);
}

void add_rms_norm(ThreadPool&, float* residual, const float* x, const float* weight, int64_t rows, int64_t dim,
                  float eps, float* out) {
    for (int64_t i = 0; i < rows * dim; ++i) residual[i] += x[i];
    cpu::rms_norm_ref(residual, weight, rows, dim, eps, out);
}

void embedding_bf16(const uint16_t* table, int64_t, int64_t hidden, const int32_t* ids, int64_t n, float* out) {
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < hidden; ++i) out[t * hidden + i] = bf16_to_f32(table[ids[t] * hidden + i]);
    }
}

void embedding_f32(const float* table, int64_t, int64_t hidden, const int32_t* ids, int64_t n, float* out) {
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < hidden; ++i) out[t * hidden + i] = table[ids[t] * hidden + i];
    }
}

void gguf_embedding(const GgufMatrix& table, const int32_t* ids, int64_t n, float* out) {
    for (int64_t t = 0; t < n; ++t)
        cpu::dequantize_gguf(table.type, table.row(ids[t]), out + t * table.cols, table.cols);
}

// One row of x through w: the dot-product types take x quantized to their activation type (as
// llama.cpp pairs them) and the scalar block dot; the others a dequantized weight row.
void gguf_row(const float* x, const GgufMatrix& w, float* out) {
    const int64_t k = w.cols;
    if (cpu::gguf_dot_supported(w.type)) {
        const GgmlType act = cpu::gguf_dot_activation_type(w.type);
        const GgmlTypeTraits t = ggml_traits(act);
        std::vector<uint32_t> qx((static_cast<size_t>(k / t.block_size) * t.type_size + 3) / 4);  // 4-byte aligned
        cpu::quantize_gguf(act, x, qx.data(), k);
        std::vector<uint8_t> stored(static_cast<size_t>(k / ggml_traits(w.type).block_size) *
                                    ggml_traits(w.type).type_size);
        for (int64_t j = 0; j < w.rows; ++j) {
            cpu::gguf_unpack_row(w, j, stored.data());  // a matrix packed by another backend, too
            out[j] = cpu::gguf_vec_dot_ref(w.type, k, stored.data(), qx.data());
        }
        return;
    }
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = 0; j < w.rows; ++j) {
        cpu::dequantize_gguf(w.type, w.row(j), row.data(), k);
        float s = 0.0f;
        for (int64_t p = 0; p < k; ++p) s += x[p] * row[static_cast<size_t>(p)];
        out[j] = s;
    }
}

void gguf_linear(ThreadPool&, const float* x, int64_t rows, const GgufMatrix& w, float* out) {
    for (int64_t r = 0; r < rows; ++r) gguf_row(x + r * w.cols, w, out + r * w.rows);
}

void gguf_moe_experts(ThreadPool&, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const GgufExperts& e, float* out) {
    std::vector<float> gate(static_cast<size_t>(e.inter)), up(gate.size()), down(static_cast<size_t>(e.hidden));
    std::memset(out, 0, static_cast<size_t>(num_tokens * e.hidden) * sizeof(float));
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int j = 0; j < k; ++j) {
            const int64_t local = topk_ids[t * k + j] - e.expert_begin;
            if (local < 0 || local >= e.num_experts()) continue;
            const auto s = static_cast<size_t>(local);
            gguf_row(x + t * e.hidden, e.gate[s], gate.data());
            gguf_row(x + t * e.hidden, e.up[s], up.data());
            for (size_t i = 0; i < gate.size(); ++i) {
                gate[i] = e.glu.apply(local, e.inter, static_cast<int64_t>(i), gate[i], up[i]);
            }
            gguf_row(gate.data(), e.down[s], down.data());
            for (int64_t i = 0; i < e.hidden; ++i) out[t * e.hidden + i] += topk_weights[t * k + j] * down[size_t(i)];
        }
    }
}

void linear_bf16(ThreadPool&, const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out) {
    cpu::linear_bf16_ref(x, m, k, w, n, out);
}
void linear_f32(ThreadPool&, const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* out) {
    cpu::linear_f32_ref(x, m, k, w, n, out);
}
// Weights another backend repacked (this one never does): the stored rows back first.
void linear_bf16_packed(ThreadPool&, const float* x, int64_t m, int64_t k, const uint16_t* packed, int64_t n,
                        float* out) {
    std::vector<uint16_t> rows(static_cast<size_t>(n * k));
    cpu::unpack_bf16_panels(packed, n, k, rows.data());
    cpu::linear_bf16_ref(x, m, k, rows.data(), n, out);
}
void linear_int8(ThreadPool&, const float* x, int64_t m, int64_t k, const int8_t* w, const float* w_scale, int64_t n,
                 float* out) {
    cpu::linear_int8_ref(x, m, k, w, w_scale, n, out);
}
void linear_int8_static(ThreadPool&, const float* x, int64_t m, const StaticInt8Weights& w, float* out) {
    cpu::linear_int8_static_ref(x, m, w, out);
}
void linear_int4(ThreadPool&, const float* x, int64_t m, const Int4Weights& w, float* out) {
    cpu::linear_int4_ref(x, m, w, out);
}

void moe_bf16(ThreadPool&, const float* x, int64_t t, const int32_t* ids, const float* w, int k,
              const MoeExpertsBf16& e, float* out) {
    cpu::moe_experts_bf16_ref(x, t, ids, w, k, e, out);
}
void moe_f32(ThreadPool&, const float* x, int64_t t, const int32_t* ids, const float* w, int k, const MoeExpertsF32& e,
             float* out) {
    cpu::moe_experts_f32_ref(x, t, ids, w, k, e, out);
}
void moe_int8(ThreadPool&, const float* x, int64_t t, const int32_t* ids, const float* w, int k,
              const MoeExpertsInt8& e, float* out) {
    cpu::moe_experts_int8_ref(x, t, ids, w, k, e, out);
}
void moe_int4(ThreadPool&, const float* x, int64_t t, const int32_t* ids, const float* w, int k,
              const MoeExpertsInt4& e, float* out) {
    cpu::moe_experts_int4_ref(x, t, ids, w, k, e, out);
}

void grouped_topk(const float* logits, int64_t t, const GroupedTopkArgs& args, int32_t* ids, float* weights) {
    cpu::GroupedTopkScratch scratch;
    cpu::grouped_topk(logits, t, args, ids, weights, scratch);
}

void paged_attention(ThreadPool&, const PagedKvLayer& kv, const PagedAttentionArgs& args) {
    cpu::paged_attention_ref(kv, args);
}
void mla_attention(ThreadPool&, const PagedLatentLayer& kv, const MlaAttentionArgs& args) {
    cpu::mla_attention_ref(kv, args);
}
void mla_absorb_q(ThreadPool&, const MlaKvB& w, const float* q, int64_t n, int64_t q_token_stride,
                  int64_t q_head_stride, float* out, int64_t out_token_stride, int64_t out_head_stride) {
    cpu::mla_absorb_q_ref(w, q, n, q_token_stride, q_head_stride, out, out_token_stride, out_head_stride);
}
void mla_expand_v(ThreadPool&, const MlaKvB& w, const float* latent, int64_t n, float* out) {
    cpu::mla_expand_v_ref(w, latent, n, out);
}

Tensor allocate(DType dtype, const Shape& shape) { return Tensor(dtype, shape); }

Backend make_backend() {
    Backend b;
    b.name = "reference";
    b.device = Device::kCpu;
    b.allocate = allocate;
    Ops& o = b.ops;
    o.rms_norm = rms_norm;
    o.add_rms_norm = add_rms_norm;
    o.embedding_bf16 = embedding_bf16;
    o.embedding_f32 = embedding_f32;
    o.gguf_embedding = gguf_embedding;
    o.linear_bf16 = linear_bf16;
    o.linear_f32 = linear_f32;
    o.linear_int8 = linear_int8;
    o.linear_int8_static = linear_int8_static;
    o.linear_int4 = linear_int4;
    o.gguf_linear = gguf_linear;
    o.moe_experts_bf16 = moe_bf16;
    o.moe_experts_f32 = moe_f32;
    o.moe_experts_int8 = moe_int8;
    o.moe_experts_int4 = moe_int4;
    o.gguf_moe_experts = gguf_moe_experts;
    o.softmax_topk = cpu::softmax_topk;
    o.grouped_topk = grouped_topk;
    o.apply_rope = cpu::apply_rope_ref;
    o.write_kv = cpu::write_kv;
    o.paged_attention = paged_attention;
    o.write_latent = cpu::write_latent;
    o.read_latent = cpu::read_latent;
    o.mla_attention = mla_attention;
    o.mla_absorb_q = mla_absorb_q;
    o.mla_expand_v = mla_expand_v;
    o.quantize_rows_int8 = cpu::quantize_rows_int8_ref;
    o.dequantize_int4_row = cpu::dequantize_int4_row;
    o.dequantize_gguf = cpu::dequantize_gguf;
    o.quantize_gguf = cpu::quantize_gguf;
    o.gguf_packed_bytes = [](const GgufMatrix&) -> size_t { return 0; };  // the stored rows, always
    o.gguf_pack = cpu::gguf_pack;
    o.bf16_packed_bytes = [](int64_t, int64_t) -> size_t { return 0; };  // the stored rows, always
    o.pack_bf16 = [](ThreadPool& pool, const uint16_t* w, int64_t n, int64_t k, uint16_t* dst) {
        cpu::pack_bf16_panels(pool, w, k, n, k, dst);
    };
    o.linear_bf16_packed = linear_bf16_packed;
    return b;
}

}  // namespace

const Backend& backend() {
    static const Backend b = make_backend();
    return b;
}

}  // namespace moeserve::kernels::reference
