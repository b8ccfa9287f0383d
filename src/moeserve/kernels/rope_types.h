// Rotary position embedding, in place, from precomputed cos/sin tables (the model builds the
// tables: default RoPE from rope_theta, or YaRN with its frequency blend and mscale).
//   kNeox:        rotate_half pairs (i, i + rotary_dim/2)   - Qwen3, Llama
//   kInterleaved: pairs (2i, 2i + 1)                         - what DeepSeek-V3's HF code
//                 computes after its view/transpose of q_pe/k_pe
#pragma once

#include <cstdint>

namespace moeserve::kernels {

enum class RopeStyle { kNeox, kInterleaved };

struct RopeArgs {
    float* x;  // f32 [num_tokens, num_heads, head_stride]; rotary part at offset 0
    int64_t num_tokens;
    int64_t num_heads;
    int64_t head_stride;       // floats between consecutive heads (>= rotary_dim)
    int64_t token_stride;      // floats between consecutive tokens (>= num_heads * head_stride)
    int64_t rotary_dim;        // even; rotated dims are [0, rotary_dim)
    const int32_t* positions;  // [num_tokens]
    const float* cos;          // [max_position, rotary_dim / 2]
    const float* sin;          // [max_position, rotary_dim / 2]
    RopeStyle style;
};

}  // namespace moeserve::kernels
