// The CPU backend's ops table. The kernels that need scratch get the calling thread's: a model
// runs on one thread at a time (its ThreadPool's workers only ever see the buffers it hands them),
// so one set per thread serves every layer of every model that thread runs, and grows to the
// largest step it has seen.
#include "moeserve/kernels/cpu/backend.h"

#include "moeserve/kernels/cpu/bf16_panels.h"
#include "moeserve/kernels/cpu/embedding.h"
#include "moeserve/kernels/cpu/gguf_dequant.h"
#include "moeserve/kernels/cpu/gguf_linear.h"
#include "moeserve/kernels/cpu/gguf_packed.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"
#include "moeserve/kernels/cpu/isa.h"
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

namespace moeserve::kernels::cpu {
namespace {

struct ThreadScratch {
    Int8Scratch int8;
    GgufScratch gguf;
    MoeScratch moe;
    GroupedTopkScratch topk;
};

ThreadScratch& thread_scratch() {
    thread_local ThreadScratch s;
    return s;
}

void run_linear_int8(ThreadPool& pool, const float* x, int64_t m, int64_t k, const int8_t* w, const float* w_scale,
                     int64_t n, float* out) {
    linear_int8(pool, x, m, k, w, w_scale, n, out, thread_scratch().int8);
}

void run_linear_int8_static(ThreadPool& pool, const float* x, int64_t m, const StaticInt8Weights& w, float* out) {
    linear_int8_static(pool, x, m, w, out, thread_scratch().int8);
}

void run_gguf_linear(ThreadPool& pool, const float* x, int64_t rows, const GgufMatrix& w, float* out) {
    gguf_linear(pool, x, rows, w, out, thread_scratch().gguf);
}

void run_moe_bf16(ThreadPool& pool, const float* x, int64_t t, const int32_t* ids, const float* weights, int k,
                  const MoeExpertsBf16& e, float* out) {
    moe_experts_bf16(pool, x, t, ids, weights, k, e, thread_scratch().moe, out);
}

void run_moe_f32(ThreadPool& pool, const float* x, int64_t t, const int32_t* ids, const float* weights, int k,
                 const MoeExpertsF32& e, float* out) {
    moe_experts_f32(pool, x, t, ids, weights, k, e, thread_scratch().moe, out);
}

void run_moe_int8(ThreadPool& pool, const float* x, int64_t t, const int32_t* ids, const float* weights, int k,
                  const MoeExpertsInt8& e, float* out) {
    MoeScratch& s = thread_scratch().moe;
    moe_experts_int8(pool, x, t, ids, weights, k, e, s, s.int8, out);
}

void run_moe_int4(ThreadPool& pool, const float* x, int64_t t, const int32_t* ids, const float* weights, int k,
                  const MoeExpertsInt4& e, float* out) {
    moe_experts_int4(pool, x, t, ids, weights, k, e, thread_scratch().moe, out);
}

size_t gguf_packed_size(const GgufMatrix& m) {
    return m.packed_rows == 1 && gguf_packs(m.type) ? gguf_packed_bytes(m.type, m.rows, m.cols) : 0;
}

void run_gguf_moe(ThreadPool& pool, const float* x, int64_t t, const int32_t* ids, const float* weights, int k,
                  const GgufExperts& e, float* out) {
    gguf_moe_experts(pool, x, t, ids, weights, k, e, thread_scratch().moe.gguf, out);
}

void run_grouped_topk(const float* logits, int64_t t, const GroupedTopkArgs& args, int32_t* ids, float* weights) {
    grouped_topk(logits, t, args, ids, weights, thread_scratch().topk);
}

Tensor allocate(DType dtype, const Shape& shape) { return Tensor(dtype, shape); }

Backend make_backend() {
    Backend b;
    b.name = "cpu";
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
    o.linear_int8 = run_linear_int8;
    o.linear_int8_static = run_linear_int8_static;
    o.linear_int4 = linear_int4;
    o.gguf_linear = run_gguf_linear;
    o.moe_experts_bf16 = run_moe_bf16;
    o.moe_experts_f32 = run_moe_f32;
    o.moe_experts_int8 = run_moe_int8;
    o.moe_experts_int4 = run_moe_int4;
    o.gguf_moe_experts = run_gguf_moe;
    o.softmax_topk = softmax_topk;
    o.grouped_topk = run_grouped_topk;
    o.apply_rope = apply_rope;
    o.write_kv = write_kv;
    o.paged_attention = paged_attention;
    o.write_latent = write_latent;
    o.read_latent = read_latent;
    o.mla_attention = mla_attention;
    o.mla_absorb_q = mla_absorb_q;
    o.mla_expand_v = mla_expand_v;
    o.quantize_rows_int8 = quantize_rows_int8;
    o.dequantize_int4_row = dequantize_int4_row;
    o.dequantize_gguf = dequantize_gguf;
    o.quantize_gguf = quantize_gguf;
    o.gguf_packed_bytes = gguf_packed_size;
    o.gguf_pack = gguf_pack;
    o.bf16_packed_bytes = [](int64_t n, int64_t k) -> size_t {
        return bf16_weight_panels() ? bf16_panel_bytes(n, k) : 0;
    };
    o.pack_bf16 = [](ThreadPool& pool, const uint16_t* w, int64_t n, int64_t k, uint16_t* dst) {
        pack_bf16_panels(pool, w, k, n, k, dst);
    };
    o.linear_bf16_packed = linear_bf16_panels;
    return b;
}

}  // namespace

const Backend& backend() {
    static const Backend b = make_backend();
    return b;
}

}  // namespace moeserve::kernels::cpu
