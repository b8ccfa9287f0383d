// Small helpers the GGUF weight quantizers share (gguf_quantize_ref.cpp, gguf_quantize_k.cpp).
#pragma once

#include <algorithm>
#include <cmath>

namespace moeserve::kernels::cpu::gguf_quantize {

// Rounds half away from zero (C's roundf), for the weight quantizers.
inline int round_int(float v) { return static_cast<int>(std::lround(v)); }
inline int clampi(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }
inline float inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// The element of largest magnitude, with its sign (0 for an all-zero span; the first such element
// where several tie; NaNs are never picked). Kept as 8 independent running bests (by index mod 8),
// each with the first index that reached it, then the best of those: one running best carried a
// compare-and-blend chain through every element (the q8_K activation quantizer of the K-quants'
// prefill spent most of its time there).
inline float signed_absmax(const float* x, int n) {
    constexpr int kWays = 8;
    float best[kWays] = {};
    int at[kWays] = {};
    int i = 0;
    for (; i + kWays <= n; i += kWays) {
        for (int w = 0; w < kWays; ++w) {
            const float a = std::fabs(x[i + w]);
            at[w] = a > best[w] ? i + w : at[w];
            best[w] = a > best[w] ? a : best[w];
        }
    }
    for (; i < n; ++i) {  // the tail goes to way 0, whose index stays the first of its best
        const float a = std::fabs(x[i]);
        at[0] = a > best[0] ? i : at[0];
        best[0] = a > best[0] ? a : best[0];
    }
    int first = -1;
    float amax = 0.0f;
    for (int w = 0; w < kWays; ++w) {
        if (best[w] > amax || (best[w] == amax && best[w] > 0.0f && at[w] < first)) {
            amax = best[w];
            first = at[w];
        }
    }
    return first < 0 ? 0.0f : x[first];
}

}  // namespace moeserve::kernels::cpu::gguf_quantize
