// Token embedding lookup: out[t] = f32(table[ids[t]]), from a bf16 or an f32 table.
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu {

// table bf16 [vocab, hidden]; ids int32 [num_tokens], each in [0, vocab); out f32 [num_tokens, hidden].
void embedding_bf16(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t num_tokens,
                    float* out);

// The same with an f32 table (--dtype float32): rows copied.
void embedding_f32(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t num_tokens,
                   float* out);

}  // namespace moeserve::kernels::cpu
