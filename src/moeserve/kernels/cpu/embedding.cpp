// Embedding lookup: bf16 rows widened to f32 (8 at a time), or f32 rows copied.
#include "moeserve/kernels/cpu/embedding.h"

#include <cstring>

#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {

void embedding_bf16(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t num_tokens,
                    float* out) {
    (void)vocab;  // ids are validated by the caller (contract: each in [0, vocab))
    for (int64_t t = 0; t < num_tokens; ++t) {
        const uint16_t* row = table + static_cast<int64_t>(ids[t]) * hidden;
        float* o = out + t * hidden;
        int64_t i = 0;
        for (; i + 8 <= hidden; i += 8) _mm256_storeu_ps(o + i, simd::load8(row + i));
        for (; i < hidden; ++i) o[i] = simd::to_f32(row[i]);
    }
}

void embedding_f32(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t num_tokens,
                   float* out) {
    (void)vocab;  // as embedding_bf16
    for (int64_t t = 0; t < num_tokens; ++t) {
        std::memcpy(out + t * hidden, table + static_cast<int64_t>(ids[t]) * hidden, static_cast<size_t>(hidden) * 4);
    }
}

}  // namespace moeserve::kernels::cpu
