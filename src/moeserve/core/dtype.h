// Element types of checkpoints and tensors, their sizes and names, and scalar conversions
// to and from f32. Depends on std only.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace moeserve {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kI8, kU8, kI32, kI64, kBool };

// Bytes per element.
size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string; nullopt when unknown.
std::optional<DType> dtype_from_name(std::string_view name);

inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// bf16 is the top half of an f32.
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// Round to nearest, ties to even (as torch does); NaN stays a quiet NaN.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

// Writes n floats as dtype: kF32 copied, kBF16 rounded (a KV cache row). Other dtypes are not
// row types here.
inline void store_f32_row(void* dst, DType dtype, const float* src, int64_t n) {
    if (dtype == DType::kF32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    auto* out = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
}

// IEEE half precision.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// OCP FP8 E4M3 ("fn": no infinities, 0x7f/0xff are NaN, max 448), as DeepSeek-V3 uses.
float f8e4m3_to_f32(uint8_t v);
// Round to nearest even, saturating to +-448; NaN -> 0x7f.
uint8_t f32_to_f8e4m3(float f);
// An fp8 KV cache row: scale = max |src[i]| / 448 (1 when the row is all zeros), dst[i] =
// f32_to_f8e4m3(src[i] / scale); returns the scale, and dst[i] * scale reads src[i] back. e4m3
// keeps 3 mantissa bits: within 2^-4 |src[i]| where src[i] / scale is normal (>= 2^-6), within
// 2^-10 scale below that.
float store_f32_row_e4m3(uint8_t* dst, const float* src, int64_t n);

}  // namespace moeserve
