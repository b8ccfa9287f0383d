// DeepSeek's MLA up-projection kv_b_proj [heads * (qk_nope + v), kv_lora] as llama.cpp's deepseek2
// GGUF files store it: split per head into attn_k_b [heads, kv_lora, qk_nope] (the key half,
// transposed, so decode can absorb it into the query) and attn_v_b [heads, v, kv_lora]. The writer
// splits, the reader joins them back into the checkpoint tensor the MLA layer loads.
#pragma once

#include <cstdint>

#include "moeserve/core/tensor.h"

namespace moeserve::model {

enum class KvbPart { kKeys, kValues };

// The attn_k_b or attn_v_b f32 tensor of an f32 kv_b_proj of `heads` heads of qk_nope key and v
// value rows each.
Tensor split_kv_b(const Tensor& kv_b, int64_t heads, int64_t qk_nope, KvbPart part);

// The f32 kv_b_proj [heads * (qk_nope + v), kv_lora] of f32 k_b [heads, kv_lora, qk_nope] and
// v_b [heads, v, kv_lora]. Throws kInvalidModel naming `label` when their shapes disagree.
Tensor join_kv_b(const Tensor& k_b, const Tensor& v_b, const std::string& label);

}  // namespace moeserve::model
