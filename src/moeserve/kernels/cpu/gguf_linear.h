// Layers on GGUF weights kept as their stored blocks: y = x @ W^T, an embedding lookup and SwiGLU
// experts. Weight types with a dot kernel (gguf_dot.h: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
// Q6_K) quantize each activation row to the type's partner (q8_0 / q8_K) and use the integer dot
// products; every other supported type (F32, F16, BF16, Q2_K, Q3_K) dequantizes one weight row at
// a time into a per-thread scratch row and takes f32 dot products, so no widened copy of a matrix
// is ever held. Multi-threaded over output rows on the caller's pool. Depends on core only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moeserve/core/ggml_type.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/weight_types.h"

namespace moeserve::kernels::cpu {

// Reused buffers (grow to the largest call; one per caller thread).
struct GgufScratch {
    std::vector<uint8_t> qx;        // activations quantized per row
    std::vector<uint8_t> qh;        // experts: the down projections' inputs quantized per row
    std::vector<uint8_t> prepared;  // quantized rows prepared for the tiles (GgufTiles::prepare)
    std::vector<float> wrow;        // [threads, cols]: dequantized weight rows (types without a dot kernel)
    std::vector<float> gathered, gate, up, down;
    std::vector<int32_t> tokens;       // experts: the slots' tokens, expert-major
    std::vector<float> token_weights;  // and their router weights
    std::vector<int64_t> offsets;      // expert e's slots: [offsets[e], offsets[e + 1])
    std::vector<int32_t> active;       // experts with slots
};

// x f32 [rows, w.cols] -> out f32 [rows, w.rows] (overwritten).
void gguf_linear(ThreadPool& pool, const float* x, int64_t rows, const GgufMatrix& w, float* out, GgufScratch& scratch);

// out f32 [n, table.cols]: row ids[i] of the table dequantized (ids in [0, table.rows), checked).
void gguf_embedding(const GgufMatrix& table, const int32_t* ids, int64_t n, float* out);

// x f32 [num_tokens, hidden]; topk_ids int32 / topk_weights f32 [num_tokens, k]; ids outside this
// rank's experts are skipped. out f32 [num_tokens, hidden] is overwritten.
void gguf_moe_experts(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const GgufExperts& experts, GgufScratch& scratch, float* out);

}  // namespace moeserve::kernels::cpu
