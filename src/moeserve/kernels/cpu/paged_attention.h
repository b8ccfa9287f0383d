// Causal attention over a paged KV cache (GQA), for prefill chunks and decode alike.
//
// KV cache of one layer, f32, bf16 or fp8 e4m3 (--kv-cache-dtype; bf16 rows are rounded to
// nearest even when written and widened exactly to f32 when read; the arithmetic stays f32):
//   k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim]
//   k_scale, v_scale [num_blocks, block_size, num_kv_heads] f32, fp8 only
// An fp8 row (one token's head_dim values of one kv head) holds e4m3 codes of value / scale with
// scale = the row's max |value| / 448 (store_f32_row_e4m3 in core/dtype.h); it reads back as
// code * scale, widened exactly and then multiplied in f32.
// A sequence's token at position p lives in block block_table[p / block_size], row p % block_size.
// Block 0 is never handed to a sequence (the engine's null block).
//
// A batch holds num_seqs sequences; sequence s contributes query tokens
// [query_start[s], query_start[s+1]) which are its LAST q_len tokens: with seq_len[s] tokens in
// the cache in total (its new tokens already written), query i of s sits at position
// seq_len[s] - q_len + i and attends to positions 0..that position (causal).
#pragma once

#include <cstdint>

#include "moeserve/core/dtype.h"
#include "moeserve/core/thread_pool.h"

namespace moeserve::kernels::cpu {

struct PagedKvLayer {
    void* k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim] of `dtype`
    void* v_cache;  // [num_blocks, block_size, num_kv_heads, head_dim] of `dtype`
    int64_t num_blocks;
    int64_t block_size;
    int64_t num_kv_heads;
    int64_t head_dim;
    DType dtype = DType::kF32;  // kF32, kBF16 or kF8E4M3
    float* k_scale = nullptr;   // kF8E4M3: [num_blocks, block_size, num_kv_heads]
    float* v_scale = nullptr;   // kF8E4M3: [num_blocks, block_size, num_kv_heads]
};

// Writes k, v f32 [num_tokens, num_kv_heads, head_dim] into the cache at slot_mapping[t]
// (= block_id * block_size + row), converted to the cache's dtype (fp8: each row quantized with
// its own scale, stored in k_scale / v_scale). A negative slot skips the token (padding).
void write_kv(const PagedKvLayer& kv, const float* k, const float* v, int64_t num_tokens, const int64_t* slot_mapping);

struct PagedAttentionArgs {
    const float* q;  // [num_tokens, num_heads, head_dim]
    float* out;      // [num_tokens, num_heads, head_dim]
    int64_t num_tokens;
    int64_t num_heads;  // multiple of kv.num_kv_heads
    int64_t num_seqs;
    const int32_t* query_start;   // [num_seqs + 1], query_start[num_seqs] == num_tokens
    const int32_t* seq_lens;      // [num_seqs] total tokens in cache per sequence
    const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
    int64_t max_blocks_per_seq;
    float scale;  // softmax scale, usually 1/sqrt(head_dim)
    // Optional [num_tokens, num_heads]: the log of each softmax's denominator in units of scaled
    // scores, lse = max + log(sum exp(score - max)); two attentions over disjoint key sets merge
    // exactly by it (MLA's cached prefix + new chunk).
    float* lse = nullptr;
};

void paged_attention(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttentionArgs& args);
void paged_attention_ref(const PagedKvLayer& kv, const PagedAttentionArgs& args);

}  // namespace moeserve::kernels::cpu
