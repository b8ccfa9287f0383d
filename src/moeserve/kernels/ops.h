// The ops facade: every kernel the model runs, as one table of functions a backend fills
// (kernels/backend.h). The model calls `kernels::ops().rms_norm(...)` and never names a backend,
// so a second backend is a folder and a registration, with no change under model/.
//
// Arguments are the kernels' own: f32 activations by pointer in the backend's memory (Buffer,
// kernels/buffer.h), weights and caches through the descriptors of kernels/*_types.h, the
// caller's ThreadPool (a backend without host threads ignores it). Scratch is the backend's own
// (the CPU backend keeps one set per calling thread), so no op takes a scratch argument.
// The semantics of each op are those documented on the CPU kernel of the same name
// (kernels/cpu/<file>.h); every backend must match them within the bounds the tests state.
// Depends on core only.
#pragma once

#include <cstdint>

#include "moeserve/core/ggml_type.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/attention_types.h"
#include "moeserve/kernels/rope_types.h"
#include "moeserve/kernels/routing_types.h"
#include "moeserve/kernels/weight_types.h"

namespace moeserve::kernels {

struct Ops {
    // Normalization (cpu/norm.h): out = rms_norm(x); add_rms_norm first adds x into residual.
    void (*rms_norm)(ThreadPool& pool, const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                     float* out);
    void (*add_rms_norm)(ThreadPool& pool, float* residual, const float* x, const float* weight, int64_t rows,
                         int64_t dim, float eps, float* out);

    // Token embeddings (cpu/embedding.h, cpu/gguf_linear.h).
    void (*embedding_bf16)(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t num_tokens,
                           float* out);
    void (*embedding_f32)(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t num_tokens,
                          float* out);
    void (*gguf_embedding)(const GgufMatrix& table, const int32_t* ids, int64_t n, float* out);

    // Linear layers, out f32 [m, n] = x f32 [m, k] @ W^T (cpu/linear*.h, cpu/gguf_linear.h).
    void (*linear_bf16)(ThreadPool& pool, const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                        float* out);
    void (*linear_f32)(ThreadPool& pool, const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* out);
    void (*linear_int8)(ThreadPool& pool, const float* x, int64_t m, int64_t k, const int8_t* w, const float* w_scale,
                        int64_t n, float* out);
    void (*linear_int8_static)(ThreadPool& pool, const float* x, int64_t m, const StaticInt8Weights& w, float* out);
    void (*linear_int4)(ThreadPool& pool, const float* x, int64_t m, const Int4Weights& w, float* out);
    void (*gguf_linear)(ThreadPool& pool, const float* x, int64_t rows, const GgufMatrix& w, float* out);

    // Fused SwiGLU experts of one rank (cpu/moe_experts*.h, cpu/gguf_linear.h): out f32
    // [num_tokens, hidden] = sum over each token's chosen local experts, overwritten.
    void (*moe_experts_bf16)(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                             const float* topk_weights, int k, const MoeExpertsBf16& experts, float* out);
    void (*moe_experts_f32)(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                            const float* topk_weights, int k, const MoeExpertsF32& experts, float* out);
    void (*moe_experts_int8)(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                             const float* topk_weights, int k, const MoeExpertsInt8& experts, float* out);
    void (*moe_experts_int4)(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                             const float* topk_weights, int k, const MoeExpertsInt4& experts, float* out);
    void (*gguf_moe_experts)(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                             const float* topk_weights, int k, const GgufExperts& experts, float* out);

    // Routing (cpu/routing.h, cpu/routing_grouped.h) and rotary embedding (cpu/rope.h).
    void (*softmax_topk)(const float* logits, int64_t num_tokens, int64_t num_experts, int k, bool renormalize,
                         int32_t* topk_ids, float* topk_weights);
    void (*grouped_topk)(const float* logits, int64_t num_tokens, const GroupedTopkArgs& args, int32_t* topk_ids,
                         float* topk_weights);
    void (*apply_rope)(const RopeArgs& args);

    // Attention over the paged caches (cpu/paged_attention.h, cpu/mla_attention.h).
    void (*write_kv)(const PagedKvLayer& kv, const float* k, const float* v, int64_t num_tokens,
                     const int64_t* slot_mapping);
    void (*paged_attention)(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttentionArgs& args);
    void (*write_latent)(const PagedLatentLayer& kv, const float* rows, int64_t num_tokens,
                         const int64_t* slot_mapping);
    void (*read_latent)(const PagedLatentLayer& kv, const int32_t* table, int64_t begin, int64_t end, float* out);
    void (*mla_attention)(ThreadPool& pool, const PagedLatentLayer& kv, const MlaAttentionArgs& args);
    void (*mla_absorb_q)(ThreadPool& pool, const MlaKvB& w, const float* q, int64_t num_tokens, int64_t q_token_stride,
                         int64_t q_head_stride, float* out, int64_t out_token_stride, int64_t out_head_stride);
    void (*mla_expand_v)(ThreadPool& pool, const MlaKvB& w, const float* latent, int64_t num_tokens, float* out);

    // Weight conversions at load, on host memory (cpu/quantize_int8.h, cpu/linear_int4.h,
    // cpu/gguf_dequant.h, cpu/gguf_quantize.h).
    void (*quantize_rows_int8)(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* q, int64_t ldq,
                               float* scales);
    void (*dequantize_int4_row)(const Int4Weights& w, int64_t j, float* out);
    void (*dequantize_gguf)(GgmlType type, const void* src, float* dst, int64_t n);
    void (*quantize_gguf)(GgmlType type, const float* x, void* dst, int64_t n);
    // GGUF weights repacked for the backend's kernels (cpu/gguf_packed.h): the bytes m takes
    // packed, 0 where the backend runs m as stored; gguf_pack writes them to dst (on the pool's
    // threads) and returns the packed matrix over dst.
    size_t (*gguf_packed_bytes)(const GgufMatrix& m);
    GgufMatrix (*gguf_pack)(ThreadPool& pool, const GgufMatrix& m, uint8_t* dst);
    // bf16 weights repacked for the backend's kernels (cpu/bf16_panels.h): the bytes a [n, k]
    // weight takes repacked, 0 where the backend runs the stored rows; pack_bf16 writes w (row
    // stride k) to dst (64-byte aligned) on the pool's threads; linear_bf16_packed runs it like linear_bf16, and
    // moe_experts_bf16 runs experts so packed (MoeExpertsBf16::panels).
    size_t (*bf16_packed_bytes)(int64_t n, int64_t k);
    void (*pack_bf16)(ThreadPool& pool, const uint16_t* w, int64_t n, int64_t k, uint16_t* dst);
    void (*linear_bf16_packed)(ThreadPool& pool, const float* x, int64_t m, int64_t k, const uint16_t* packed,
                               int64_t n, float* out);
};

// The active backend's ops (backend.h: use_backend).
const Ops& ops();

}  // namespace moeserve::kernels
