// Multi-head latent attention (DeepSeek MLA) over a paged cache of compressed latents, in the
// absorbed form: every head attends with one query of kv_lora_rank + rope_dim values against the
// cached rows [latent (kv_lora_rank), k_pe (rope_dim)], which all heads share, and reads back a
// weighted sum of the latents. W_UK / W_UV (the per-head halves of kv_b_proj) are applied before
// and after the attention by mla_absorb_q and mla_expand_v.
//
// Latent cache of one layer, f32, bf16 or fp8 e4m3 (--kv-cache-dtype; bf16 rounded to nearest
// even when written, widened exactly when read):
//   cache [num_blocks, block_size, kv_lora_rank + rope_dim]   row = [latent, k_pe after RoPE]
//   scale [num_blocks, block_size, 2] f32, fp8 only: the latent's scale, then k_pe's
// fp8 quantizes the latent and k_pe of a row each with its own scale (max |value| / 448, see
// store_f32_row_e4m3 in core/dtype.h): k_pe (after RoPE, not normalized) and the normalized latent
// have different ranges. A value reads back as code * scale (widened exactly, multiplied in f32).
// Sequences, query_start, seq_lens and block tables as in paged_attention.h (causal; query i of a
// sequence with q_len new tokens sits at position seq_len - q_len + i).
#pragma once

#include <cstdint>

#include "moeserve/core/dtype.h"
#include "moeserve/core/thread_pool.h"

namespace moeserve::kernels::cpu {

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

// Writes rows f32 [num_tokens, kv_lora_rank + rope_dim] at slot_mapping[t], converted to the
// cache's dtype (fp8: the latent and k_pe each with their scale); a negative slot skips the token.
void write_latent(const PagedLatentLayer& kv, const float* rows, int64_t num_tokens, const int64_t* slot_mapping);

// Reads positions [begin, end) of one sequence (block table `table`) back as f32 rows
// out [end - begin, kv_lora_rank + rope_dim].
void read_latent(const PagedLatentLayer& kv, const int32_t* table, int64_t begin, int64_t end, float* out);

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
    // Optional [num_tokens, num_heads]: log of each softmax's denominator (as paged_attention.h).
    float* lse = nullptr;
    // false: every query of a sequence attends all seq_lens[s] cached rows (a cached prefix the
    // queries all follow), not only those up to its own position. seq_lens[s] must be > 0.
    bool causal = true;
};

void mla_attention(ThreadPool& pool, const PagedLatentLayer& kv, const MlaAttentionArgs& args);
void mla_attention_ref(const PagedLatentLayer& kv, const MlaAttentionArgs& args);

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

// out[t, h, :] = sum_i q_nope[t, h, i] * W_UK[h, i, :]  (f32 [kv_lora_rank] per head).
// q_nope at q + t * q_token_stride + h * q_head_stride; out at out + t * out_token_stride +
// h * out_head_stride.
void mla_absorb_q(ThreadPool& pool, const MlaKvB& w, const float* q, int64_t num_tokens, int64_t q_token_stride,
                  int64_t q_head_stride, float* out, int64_t out_token_stride, int64_t out_head_stride);
void mla_absorb_q_ref(const MlaKvB& w, const float* q, int64_t num_tokens, int64_t q_token_stride,
                      int64_t q_head_stride, float* out, int64_t out_token_stride, int64_t out_head_stride);

// out f32 [num_tokens, num_heads, v_dim]: out[t, h, j] = dot(latent[t, h, :], W_UV[h, j, :]),
// latent f32 [num_tokens, num_heads, kv_lora_rank].
void mla_expand_v(ThreadPool& pool, const MlaKvB& w, const float* latent, int64_t num_tokens, float* out);
void mla_expand_v_ref(const MlaKvB& w, const float* latent, int64_t num_tokens, float* out);

}  // namespace moeserve::kernels::cpu
