// The element types of GGUF tensors (ggml's type numbers), with each one's block geometry and
// name. Shared by io (the GGUF reader and writer check byte sizes with it) and kernels (the
// block layouts assert their sizes against it), which must not see each other. Depends on std
// only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "moeserve/core/dtype.h"

namespace moeserve {

// The numbers are ggml's (`enum ggml_type`) and appear as-is in GGUF files. Gaps are types ggml
// removed (4, 5, 31-33, 36-38); a file that uses one is refused as an unknown type.
enum class GgmlType : uint32_t {
    kF32 = 0,
    kF16 = 1,
    kQ4_0 = 2,
    kQ4_1 = 3,
    kQ5_0 = 6,
    kQ5_1 = 7,
    kQ8_0 = 8,
    kQ8_1 = 9,
    kQ2_K = 10,
    kQ3_K = 11,
    kQ4_K = 12,
    kQ5_K = 13,
    kQ6_K = 14,
    kQ8_K = 15,
    kIQ2_XXS = 16,
    kIQ2_XS = 17,
    kIQ3_XXS = 18,
    kIQ1_S = 19,
    kIQ4_NL = 20,
    kIQ3_S = 21,
    kIQ2_S = 22,
    kIQ4_XS = 23,
    kI8 = 24,
    kI16 = 25,
    kI32 = 26,
    kI64 = 27,
    kF64 = 28,
    kIQ1_M = 29,
    kBF16 = 30,
    kTQ1_0 = 34,
    kTQ2_0 = 35,
    kMXFP4 = 39,
    kNVFP4 = 40,
    kQ1_0 = 41,
    kQ2_0 = 42,
    // moeserve's own, never in a file (ggml_type_traits(number) does not know it): DeepSeek's
    // block-scaled FP8 weights, each row's 128-column blocks repacked as the f32 block scale
    // followed by 128 E4M3 bytes, so the GGUF dot-product and experts code runs them in place
    // (model/formats/fp8_blocks.h).
    kF8E4M3x128 = 1u << 16,
};

// Elements per K-quant super-block.
inline constexpr int64_t kQK_K = 256;

struct GgmlTypeTraits {
    std::string_view name;  // gguf-py's spelling: "Q4_K", "IQ2_XXS", "BF16"
    int64_t block_size;     // elements per block (1 for plain element types)
    uint64_t type_size;     // bytes per block
    bool supported;         // moeserve reads and dequantizes it (see kernels/cpu/gguf_dequant.h)
};

// The traits of a known type number, or nullopt for a number ggml does not define (or removed)
// and for moeserve's own types: a file that names one is refused.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type);
// Traits of a known type (the enum holds only known numbers and moeserve's own types).
GgmlTypeTraits ggml_traits(GgmlType type);
inline std::string_view ggml_type_name(GgmlType type) { return ggml_traits(type).name; }

// The element type of a tensor the project can view as plain elements (F32, F16, BF16); nullopt
// for block-quantized types.
inline std::optional<DType> ggml_plain_dtype(GgmlType type) {
    switch (type) {
        case GgmlType::kF32:
            return DType::kF32;
        case GgmlType::kF16:
            return DType::kF16;
        case GgmlType::kBF16:
            return DType::kBF16;
        default:
            return std::nullopt;
    }
}

// The supported types, comma-separated, for error messages.
std::string_view ggml_supported_type_names();

// Bytes of `numel` elements of `type`, or nullopt when numel is not a whole number of blocks or
// the byte count does not fit in 64 bits.
std::optional<uint64_t> ggml_nbytes(GgmlType type, uint64_t numel);

}  // namespace moeserve
