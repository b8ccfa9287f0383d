// convert_to_f32 (declared in weight_source.h): every checkpoint dtype to f32.
#include <cstring>

#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/cpu/convert_f16.h"

namespace moeserve::io {
namespace {

// Element i of unaligned little-endian storage.
template <typename T>
T load(const uint8_t* p, size_t i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
}

template <typename T>
void convert_by_value(const uint8_t* src, size_t n, float* dst) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(load<T>(src, i));
}

void convert_f8e4m3(const uint8_t* src, size_t n, float* dst) {
    float table[256];  // per call: 256 decodes are nothing next to a weight matrix
    for (int c = 0; c < 256; ++c) table[c] = f8e4m3_to_f32(static_cast<uint8_t>(c));
    for (size_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

}  // namespace

void convert_to_f32(const TensorView& src, float* dst) {
    const auto* p = static_cast<const uint8_t*>(src.data);
    const size_t n = static_cast<size_t>(src.numel());
    if (n == 0) return;
    switch (src.dtype) {
        case DType::kF32:
            std::memcpy(dst, p, n * sizeof(float));
            return;
        case DType::kF16:
            kernels::cpu::f16_to_f32_array(p, n, dst);
            return;
        case DType::kBF16:
            for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load<uint16_t>(p, i));
            return;
        case DType::kF8E4M3:
            convert_f8e4m3(p, n, dst);
            return;
        case DType::kI8:
            convert_by_value<int8_t>(p, n, dst);
            return;
        case DType::kU8:
            convert_by_value<uint8_t>(p, n, dst);
            return;
        case DType::kI32:
            convert_by_value<int32_t>(p, n, dst);
            return;
        case DType::kI64:
            convert_by_value<int64_t>(p, n, dst);
            return;
        case DType::kBool:
            for (size_t i = 0; i < n; ++i) dst[i] = p[i] != 0 ? 1.0f : 0.0f;
            return;
    }
}

}  // namespace moeserve::io
