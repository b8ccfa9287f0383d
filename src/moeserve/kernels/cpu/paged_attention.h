// Causal attention over a paged KV cache (GQA), for prefill chunks and decode alike: the CPU
// kernels. The cache layout and the arguments are in kernels/attention_types.h.
#pragma once

#include <cstdint>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/attention_types.h"

namespace moeserve::kernels::cpu {

// Writes k, v f32 [num_tokens, num_kv_heads, head_dim] into the cache at slot_mapping[t]
// (= block_id * block_size + row), converted to the cache's dtype (fp8: each row quantized with
// its own scale, stored in k_scale / v_scale). A negative slot skips the token (padding).
void write_kv(const PagedKvLayer& kv, const float* k, const float* v, int64_t num_tokens, const int64_t* slot_mapping);

void paged_attention(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttentionArgs& args);
void paged_attention_ref(const PagedKvLayer& kv, const PagedAttentionArgs& args);

}  // namespace moeserve::kernels::cpu
