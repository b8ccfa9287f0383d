// The attention kernels' arguments, the same for every backend: one layer's paged KV cache (GQA
// keys and values, or MLA's compressed latents), the batch's sequences and MLA's kv_b_proj.
// Depends on core only.
//
// GQA:
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
// seq_len[s] - q_len + i and attends to positions 0..that position (causal; the last `window` of
// them with a sliding window).
//
// MLA:
// Latent cache of one layer, f32, bf16 or fp8 e4m3 (--kv-cache-dtype; bf16 rounded to nearest
// even when written, widened exactly when read):
//   cache [num_blocks, block_size, kv_lora_rank + rope_dim]   row = [latent, k_pe after RoPE]
//   scale [num_blocks, block_size, 2] f32, fp8 only: the latent's scale, then k_pe's
// fp8 quantizes the latent and k_pe of a row each with its own scale (max |value| / 448, see
// store_f32_row_e4m3 in core/dtype.h): k_pe (after RoPE, not normalized) and the normalized latent
// have different ranges. A value reads back as code * scale (widened exactly, multiplied in f32).
// Sequences, query_start, seq_lens and block tables as for GQA above (causal; query i of a
// sequence with q_len new tokens sits at position seq_len - q_len + i).
#pragma once

#include <cstdint>

#include "moeserve/core/dtype.h"

namespace moeserve::kernels {

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
    // Optional [num_heads]: attention sinks (gpt-oss), one logit per head in units of scaled
    // scores. Each softmax's denominator gains exp(sink - max) while no value row is added, so a
    // head can attend to "nothing"; lse includes the term.
    const float* sinks = nullptr;
    // > 0: sliding-window attention, as Hugging Face's sliding_window mask: the query at position
    // p attends keys (p - window, p] only. 0: the whole causal range.
    int64_t window = 0;
};

struct PagedLatentLayer {
    void* cache;  // [num_blocks, block_size, kv_lora_rank + rope_dim] of `dtype`
    int64_t num_blocks;
    int64_t block_size;
    int64_t kv_lora_rank;
    int64_t rope_dim;
    DType dtype = DType::kF32;  // kF32, kBF16 or kF8E4M3
    float* scale = nullptr;     // kF8E4M3: [num_blocks, block_size, 2] (latent, k_pe)

    int64_t row_dim() const { return kv_lora_rank + rope_dim; }
};

struct MlaAttentionArgs {
    const float* q;  // [num_tokens, num_heads, kv_lora_rank + rope_dim]: [q absorbed, q_pe]
    float* out;      // [num_tokens, num_heads, kv_lora_rank]: softmax-weighted latents
    int64_t num_tokens;
    int64_t num_heads;
    int64_t num_seqs;
    const int32_t* query_start;   // [num_seqs + 1]
    const int32_t* seq_lens;      // [num_seqs]
    const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
    int64_t max_blocks_per_seq;
    float scale;  // softmax scale (qk_head_dim^-0.5, times the YaRN correction)
    // Optional [num_tokens, num_heads]: log of each softmax's denominator (as PagedAttentionArgs).
    float* lse = nullptr;
    // false: every query of a sequence attends all seq_lens[s] cached rows (a cached prefix the
    // queries all follow), not only those up to its own position. seq_lens[s] must be > 0.
    bool causal = true;
};

// kv_b_proj weight viewed per head: w [num_heads, nope_dim + v_dim, kv_lora_rank], rows
// [0, nope_dim) are W_UK, rows [nope_dim, nope_dim + v_dim) are W_UV. Exactly one of w_bf16 and
// w_f32 is set.
struct MlaKvB {
    const uint16_t* w_bf16;
    const float* w_f32;
    int64_t num_heads;
    int64_t nope_dim;
    int64_t v_dim;
    int64_t kv_lora_rank;
};

}  // namespace moeserve::kernels
