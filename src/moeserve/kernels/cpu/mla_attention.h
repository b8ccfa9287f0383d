// Multi-head latent attention (DeepSeek MLA) over a paged cache of compressed latents, in the
// absorbed form: every head attends with one query of kv_lora_rank + rope_dim values against the
// cached rows [latent (kv_lora_rank), k_pe (rope_dim)], which all heads share, and reads back a
// weighted sum of the latents. W_UK / W_UV (the per-head halves of kv_b_proj) are applied before
// and after the attention by mla_absorb_q and mla_expand_v.
// The cache layout and the arguments are in kernels/attention_types.h.
#pragma once

#include <cstdint>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/attention_types.h"

namespace moeserve::kernels::cpu {

// Writes rows f32 [num_tokens, kv_lora_rank + rope_dim] at slot_mapping[t], converted to the
// cache's dtype (fp8: the latent and k_pe each with their scale); a negative slot skips the token.
void write_latent(const PagedLatentLayer& kv, const float* rows, int64_t num_tokens, const int64_t* slot_mapping);

// Reads positions [begin, end) of one sequence (block table `table`) back as f32 rows
// out [end - begin, kv_lora_rank + rope_dim].
void read_latent(const PagedLatentLayer& kv, const int32_t* table, int64_t begin, int64_t end, float* out);

void mla_attention(ThreadPool& pool, const PagedLatentLayer& kv, const MlaAttentionArgs& args);
void mla_attention_ref(const PagedLatentLayer& kv, const MlaAttentionArgs& args);

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
