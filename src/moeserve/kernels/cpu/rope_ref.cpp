// Scalar reference for apply_rope, written per pair straight from the formulas.
#include "moeserve/kernels/cpu/rope.h"

namespace moeserve::kernels::cpu {

void apply_rope_ref(const RopeArgs& a) {
    const int64_t half = a.rotary_dim / 2;
    for (int64_t t = 0; t < a.num_tokens; ++t) {
        const float* c = a.cos + int64_t{a.positions[t]} * half;
        const float* s = a.sin + int64_t{a.positions[t]} * half;
        for (int64_t h = 0; h < a.num_heads; ++h) {
            float* x = a.x + t * a.token_stride + h * a.head_stride;
            for (int64_t i = 0; i < half; ++i) {
                const int64_t i0 = a.style == RopeStyle::kNeox ? i : 2 * i;
                const int64_t i1 = a.style == RopeStyle::kNeox ? i + half : 2 * i + 1;
                const float x0 = x[i0], x1 = x[i1];
                x[i0] = x0 * c[i] - x1 * s[i];
                x[i1] = x1 * c[i] + x0 * s[i];
            }
        }
    }
}

}  // namespace moeserve::kernels::cpu
