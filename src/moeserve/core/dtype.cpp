#include "moeserve/core/dtype.h"

#include <algorithm>
#include <cmath>

namespace moeserve {

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return 4;
        case DType::kF16:
            return 2;
        case DType::kBF16:
            return 2;
        case DType::kF8E4M3:
            return 1;
        case DType::kI8:
            return 1;
        case DType::kU8:
            return 1;
        case DType::kI32:
            return 4;
        case DType::kI64:
            return 8;
        case DType::kBool:
            return 1;
    }
    return 0;
}

std::string_view dtype_name(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return "F32";
        case DType::kF16:
            return "F16";
        case DType::kBF16:
            return "BF16";
        case DType::kF8E4M3:
            return "F8_E4M3";
        case DType::kI8:
            return "I8";
        case DType::kU8:
            return "U8";
        case DType::kI32:
            return "I32";
        case DType::kI64:
            return "I64";
        case DType::kBool:
            return "BOOL";
    }
    return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI8, DType::kU8, DType::kI32,
                    DType::kI64, DType::kBool}) {
        if (dtype_name(d) == name) return d;
    }
    return std::nullopt;
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        // zero or subnormal: mant * 2^-24
        float v = std::ldexp(static_cast<float>(mant), -24);
        return sign ? -v : v;
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const float a = std::fabs(f);
    if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
    if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (a < 6.103515625e-05f) {                                       // subnormal range: quantize to multiples of 2^-24
        const float q = std::nearbyint(a * 16777216.0f);
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
    }
    uint32_t bits = f32_bits(a);
    bits += 0xfffu + ((bits >> 13) & 1u);  // round mantissa to 10 bits, ties to even
    const uint32_t exp = (bits >> 23) - 112;
    return static_cast<uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ffu));
}

float f8e4m3_to_f32(uint8_t v) {
    const bool neg = v & 0x80u;
    const uint32_t exp = (v >> 3) & 0xfu;
    const uint32_t mant = v & 0x7u;
    float out;
    if (exp == 0xf && mant == 0x7) {
        out = std::nanf("");
    } else if (exp == 0) {
        out = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
    } else {
        out = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, static_cast<int>(exp) - 7);
    }
    return neg ? -out : out;
}

uint8_t f32_to_f8e4m3(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);  // saturate to max finite
    if (a < 0.015625f) {
        // Below the smallest normal 2^-6: multiples of 2^-9 (a * 512 is exact). The nearest one,
        // ties to even, is its own code: subnormal codes 0..7 are m * 2^-9, and 8 is 2^-6.
        return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f)));
    }
    // Normal: keep 3 mantissa bits, rounding the 20 dropped ones to nearest, ties to even (a
    // carry into the exponent is the right answer; a < 448 never carries past 448 = 0x7e).
    uint32_t bits = f32_bits(a);
    bits += 0x7ffffu + ((bits >> 20) & 1u);
    const uint32_t exp = (bits >> 23) - 127 + 7;  // 1..15
    return static_cast<uint8_t>(sign | (exp << 3) | ((bits >> 20) & 0x7u));
}

float store_f32_row_e4m3(uint8_t* dst, const float* src, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f8e4m3(src[i] / scale);
    return scale;
}

}  // namespace moeserve
