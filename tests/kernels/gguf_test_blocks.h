// Test data for the GGUF dot-product kernels (gguf_dot_test.cpp, gguf_packed_test.cpp): weight
// rows as quantized floats or raw random blocks with sane scales, and activation rows quantized as
// the dot product pairs them.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/core/ggml_type.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"

namespace moeserve::kernels::cpu {

// Byte offsets of each block's f16 scales (d, dmin) for the raw random blocks.
inline std::vector<size_t> scale_offsets(GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_0:
        case GgmlType::kQ5_0:
        case GgmlType::kQ8_0:
            return {0};
        case GgmlType::kQ4_1:
        case GgmlType::kQ5_1:
            return {0, 2};
        case GgmlType::kQ4_K:
        case GgmlType::kQ5_K:
            return {0, 2};
        case GgmlType::kQ2_K:
            return {80, 82};
        case GgmlType::kQ3_K:
            return {108};
        case GgmlType::kQ6_K:
            return {208};
        default:
            return {};
    }
}

// One weight row of n elements: quantized normal floats, or random bytes with sane scales.
// Returned with one leading byte, so data() + 1 is an odd address.
inline std::string weight_row(GgmlType type, int64_t n, bool raw, std::mt19937& rng) {
    const auto traits = ggml_traits(type);
    std::string bytes(*ggml_nbytes(type, static_cast<uint64_t>(n)) + 1, '\0');
    if (raw && type == GgmlType::kF8E4M3x128) {  // every E4M3 code but NaN (0x7f, 0xff); f32 scales
        std::uniform_real_distribution<float> scale(1e-4f, 0.05f);
        for (int64_t b = 0; b < n / traits.block_size; ++b) {
            char* block = &bytes[1 + static_cast<size_t>(b) * traits.type_size];
            const float d = scale(rng);
            std::memcpy(block, &d, 4);
            for (int i = 0; i < traits.block_size; ++i) block[4 + i] = static_cast<char>(rng() % 0x7f | (rng() & 0x80));
        }
    } else if (raw && type == GgmlType::kMXFP4) {  // every nibble; e8m0 scales 2^-20 .. 2^-5 (e - 128)
        for (size_t i = 1; i < bytes.size(); ++i) bytes[i] = static_cast<char>(rng());
        for (int64_t b = 0; b < n / traits.block_size; ++b) {
            bytes[1 + static_cast<size_t>(b) * traits.type_size] = static_cast<char>(108 + rng() % 16);
        }
    } else if (raw) {
        for (size_t i = 1; i < bytes.size(); ++i) bytes[i] = static_cast<char>(rng());
        std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
        for (int64_t b = 0; b < n / traits.block_size; ++b) {
            for (const size_t off : scale_offsets(type)) {
                const uint16_t h = f32_to_f16(scale(rng));
                std::memcpy(&bytes[1 + static_cast<size_t>(b) * traits.type_size + off], &h, 2);
            }
        }
    } else {
        std::vector<float> x(static_cast<size_t>(n));
        std::normal_distribution<float> normal(0.0f, 0.5f);
        for (float& v : x) v = normal(rng);
        quantize_gguf(type, x.data(), &bytes[1], n);
    }
    return bytes;
}

// Activations quantized as the dot product expects, in an aligned buffer.
inline std::vector<uint64_t> activations(GgmlType type, int64_t n, std::mt19937& rng) {
    std::vector<float> x(static_cast<size_t>(n));
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    for (float& v : x) v = u(rng);
    const GgmlType at = gguf_dot_activation_type(type);
    std::vector<uint64_t> q((*ggml_nbytes(at, static_cast<uint64_t>(n)) + 7) / 8 + 1);
    quantize_gguf(at, x.data(), q.data(), n);
    return q;
}

}  // namespace moeserve::kernels::cpu
