// Scalar reference for silu_mul.
#include <cmath>

#include "moeserve/kernels/cpu/activation.h"

namespace moeserve::kernels::cpu {

void silu_mul_ref(const float* gate_up, int64_t rows, int64_t inter, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* g = gate_up + r * 2 * inter;
        for (int64_t i = 0; i < inter; ++i) {
            const float s = g[i] / (1.0f + std::exp(-g[i]));
            out[r * inter + i] = s * g[inter + i];
        }
    }
}

}  // namespace moeserve::kernels::cpu
