// Small helpers the GGUF weight quantizers share (gguf_quantize_ref.cpp, gguf_quantize_k.cpp).
#pragma once

#include <algorithm>
#include <cmath>

namespace moeserve::kernels::cpu::gguf_quantize {

// Rounds half away from zero (C's roundf), for the weight quantizers.
inline int round_int(float v) { return static_cast<int>(std::lround(v)); }
inline int clampi(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }
inline float inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// The element of largest magnitude, with its sign (0 for an all-zero span).
inline float signed_absmax(const float* x, int n) {
    float best = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
    }
    return best;
}

}  // namespace moeserve::kernels::cpu::gguf_quantize
