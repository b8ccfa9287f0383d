// Token sampling from one row of logits: greedy, or temperature + top-k + top-p + min-p with a
// caller-owned Rng (so each request can have its own reproducible stream).
#pragma once

#include <cstdint>
#include <vector>

#include "moeserve/core/rng.h"

namespace moeserve::kernels::cpu {

struct SamplingSettings {
    float temperature = 1.0f;  // 0 = greedy (argmax, lowest id on ties)
    int top_k = 0;             // 0 or < 0 = all tokens
    float top_p = 1.0f;        // nucleus: smallest set with cumulative probability >= top_p
    float min_p = 0.0f;        // drop tokens with p < min_p * p_max
};

// Reusable buffers, so steady-state sampling does not allocate.
struct SampleScratch {
    std::vector<int32_t> ids;
    std::vector<float> probs;
};

// logits f32 [vocab]. Deterministic for a given Rng state.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingSettings& settings, Rng& rng,
                     SampleScratch& scratch);

// Index of the largest value; the lowest index on ties; NaNs never win (0 when values[0] is NaN).
// AVX2, indices must fit int32 (n < 2^31).
int32_t argmax(const float* values, int64_t n);
// Scalar reference of argmax, used by the tests.
int32_t argmax_ref(const float* values, int64_t n);

}  // namespace moeserve::kernels::cpu
