// The table of ggml types (see ggml_type.h). Sizes follow ggml's block structs; the K-quant
// super-blocks hold 256 elements.
#include "moeserve/core/ggml_type.h"

#include <array>

namespace moeserve {
namespace {

struct Row {
    uint32_t type;
    GgmlTypeTraits traits;
};

// clang-format off
constexpr std::array<Row, 36> kTypes = {{
    {0,  {"F32",     1,     4,   true}},
    {1,  {"F16",     1,     2,   true}},
    {2,  {"Q4_0",    32,    18,  true}},   // f16 d, 16 bytes of nibbles
    {3,  {"Q4_1",    32,    20,  true}},   // f16 d, f16 m, 16 bytes of nibbles
    {6,  {"Q5_0",    32,    22,  true}},   // f16 d, 4 bytes of high bits, 16 bytes of nibbles
    {7,  {"Q5_1",    32,    24,  true}},   // f16 d, f16 m, 4 + 16 bytes
    {8,  {"Q8_0",    32,    34,  true}},   // f16 d, 32 int8
    {9,  {"Q8_1",    32,    36,  false}},
    {10, {"Q2_K",    kQK_K, 84,  true}},   // 16 scale bytes, 64 bytes of 2-bit q, f16 d, dmin
    {11, {"Q3_K",    kQK_K, 110, true}},   // 32 bytes high mask, 64 bytes 2-bit q, 12 scales, f16 d
    {12, {"Q4_K",    kQK_K, 144, true}},   // f16 d, dmin, 12 packed scales, 128 bytes of nibbles
    {13, {"Q5_K",    kQK_K, 176, true}},   // Q4_K plus 32 bytes of high bits
    {14, {"Q6_K",    kQK_K, 210, true}},   // 128 low nibbles, 64 high 2-bits, 16 int8 scales, f16 d
    {15, {"Q8_K",    kQK_K, 292, true}},   // f32 d, 256 int8, 16 int16 block sums
    {16, {"IQ2_XXS", kQK_K, 66,  false}},
    {17, {"IQ2_XS",  kQK_K, 74,  false}},
    {18, {"IQ3_XXS", kQK_K, 98,  false}},
    {19, {"IQ1_S",   kQK_K, 50,  false}},
    {20, {"IQ4_NL",  32,    18,  false}},
    {21, {"IQ3_S",   kQK_K, 110, false}},
    {22, {"IQ2_S",   kQK_K, 82,  false}},
    {23, {"IQ4_XS",  kQK_K, 136, false}},
    {24, {"I8",      1,     1,   false}},
    {25, {"I16",     1,     2,   false}},
    {26, {"I32",     1,     4,   false}},
    {27, {"I64",     1,     8,   false}},
    {28, {"F64",     1,     8,   false}},
    {29, {"IQ1_M",   kQK_K, 56,  false}},
    {30, {"BF16",    1,     2,   true}},
    {34, {"TQ1_0",   kQK_K, 54,  false}},
    {35, {"TQ2_0",   kQK_K, 66,  false}},
    {39, {"MXFP4",   32,    17,  true}},   // e8m0 exponent, 16 bytes of e2m1 nibbles
    {40, {"NVFP4",   64,    36,  false}},
    {41, {"Q1_0",    128,   18,  false}},
    {42, {"Q2_0",    64,    18,  false}},
    // moeserve's own (not read from files): f32 block scale, 128 E4M3 bytes
    {static_cast<uint32_t>(GgmlType::kF8E4M3x128), {"F8_E4M3x128", 128, 132, true}},
}};
// clang-format on

constexpr uint32_t kFirstOwnType = static_cast<uint32_t>(GgmlType::kF8E4M3x128);

const GgmlTypeTraits* find_traits(uint32_t type) {
    for (const Row& r : kTypes) {
        if (r.type == type) return &r.traits;
    }
    return nullptr;
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type) {
    const GgmlTypeTraits* t = type < kFirstOwnType ? find_traits(type) : nullptr;
    if (t == nullptr) return std::nullopt;
    return *t;
}

GgmlTypeTraits ggml_traits(GgmlType type) {
    // Every enumerator is a row of the table.
    return *find_traits(static_cast<uint32_t>(type));
}

std::string_view ggml_supported_type_names() {
    return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, MXFP4";
}

std::optional<uint64_t> ggml_nbytes(GgmlType type, uint64_t numel) {
    const GgmlTypeTraits t = ggml_traits(type);
    const auto block = static_cast<uint64_t>(t.block_size);
    if (numel % block != 0) return std::nullopt;
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel / block, t.type_size, &bytes)) return std::nullopt;
    return bytes;
}

}  // namespace moeserve
