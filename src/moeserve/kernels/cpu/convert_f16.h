// f16 storage widened to f32: the loader's conversion of F16 checkpoint tensors
// (io::convert_to_f32), with the F16C instruction where the build targets it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moeserve::kernels::cpu {

// dst[i] = the f16 at src + 2i (little-endian, unaligned), exactly (a NaN may come out quieted).
void f16_to_f32_array(const uint8_t* src, size_t n, float* dst);

}  // namespace moeserve::kernels::cpu
