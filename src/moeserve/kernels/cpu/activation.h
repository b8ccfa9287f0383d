// SwiGLU activation on a fused gate|up projection: out[r, i] = silu(gu[r, i]) * gu[r, inter + i].
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu {

// gate_up f32 [rows, 2 * inter] (gate first, then up); out f32 [rows, inter].
void silu_mul(const float* gate_up, int64_t rows, int64_t inter, float* out);
void silu_mul_ref(const float* gate_up, int64_t rows, int64_t inter, float* out);

}  // namespace moeserve::kernels::cpu
