// The block layouts of the GGUF (ggml) quantized types, byte for byte as llama.cpp stores them,
// so kernels can compute on a mapped file's blocks in place. Every field is a byte array (f16
// scales as two little-endian bytes), so a block may sit at any address: GGUF only aligns
// tensors to general.alignment, which may be 1. Q8_K, the activation format of the K-quant dot
// products, is the exception: it lives in our own aligned buffers. Depends on core only.
#pragma once

#include <cstdint>
#include <cstring>

#include "moeserve/core/dtype.h"
#include "moeserve/core/ggml_type.h"

namespace moeserve::kernels::cpu {

inline constexpr int kQK4_0 = 32;  // elements per block of the 32-element types
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = static_cast<int>(moeserve::kQK_K);
inline constexpr int kKScaleSize = 12;  // packed 6-bit scales and mins of Q4_K / Q5_K

// y = d * (q - 8), q the nibbles: elements 0-15 in the low nibbles of qs, 16-31 in the high.
struct BlockQ4_0 {
    uint8_t d[2];
    uint8_t qs[kQK4_0 / 2];
};
// y = d * q + m
struct BlockQ4_1 {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qs[kQK4_0 / 2];
};
// y = d * (q - 16), q = nibble | bit j of qh (a little-endian u32) << 4
struct BlockQ5_0 {
    uint8_t d[2];
    uint8_t qh[4];
    uint8_t qs[kQK4_0 / 2];
};
// y = d * q + m, q as in Q5_0
struct BlockQ5_1 {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qh[4];
    uint8_t qs[kQK4_0 / 2];
};
// y = d * q
struct BlockQ8_0 {
    uint8_t d[2];
    int8_t qs[kQK8_0];
};

// 16 sub-blocks of 16: y = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q 2 bits.
// Element 128 h + 32 s + l is bits 2s..2s+1 of qs[32 h + l].
struct BlockQ2_K {
    uint8_t scales[kQK_K / 16];
    uint8_t qs[kQK_K / 4];
    uint8_t d[2];
    uint8_t dmin[2];
};
// 16 sub-blocks of 16: y = d * (scale_j - 32) * (q - (hbit ? 0 : 4)), q 2 bits as in Q2_K,
// hbit of element 32 b + l is bit b of hmask[l]; scale_j 6 bits, packed in 12 bytes: the low
// nibble in scales[j % 8] (j < 8: low half, else high half), the top 2 bits in scales[8 + j % 4]
// at bit 2 (j / 4).
struct BlockQ3_K {
    uint8_t hmask[kQK_K / 8];
    uint8_t qs[kQK_K / 4];
    uint8_t scales[12];
    uint8_t d[2];
};
// 8 sub-blocks of 32: y = d * sc_j * q - dmin * m_j, q a nibble: element 64 c + l is the low
// nibble of qs[32 c + l] (l < 32), element 64 c + 32 + l its high nibble. sc, m 6 bits in
// `scales` (see unpack_scale_min_k4).
struct BlockQ4_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[kKScaleSize];
    uint8_t qs[kQK_K / 2];
};
// Q4_K plus a fifth bit: bit j of qh[l] for element 32 j + l.
struct BlockQ5_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[kKScaleSize];
    uint8_t qh[kQK_K / 8];
    uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16: y = d * scales[j] * (q - 32), q 6 bits: for half h and element
// 128 h + 32 r + l, the nibble is ql[64 h + 32 (r % 2) + l] >> 4 (r / 2), the top 2 bits are
// qh[32 h + l] >> 2 r.
struct BlockQ6_K {
    uint8_t ql[kQK_K / 2];
    uint8_t qh[kQK_K / 4];
    int8_t scales[kQK_K / 16];
    uint8_t d[2];
};
// MXFP4 (OCP microscaling, gpt-oss's expert weights): y = kMxfp4Values[q] * e8m0_to_f32_half(e),
// q the nibbles as in Q4_0 (elements 0-15 low, 16-31 high). The values are the e2m1 numbers
// doubled, so they are integers and the scale is halved: 2^(e - 128), the same products.
struct BlockMXFP4 {
    uint8_t e;
    uint8_t qs[kQK4_0 / 2];
};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as f32, by its bits as ggml builds it: e 0 and 1 are the subnormals 2^-128 and
// 2^-127, e 255 (NaN in the OCP format) is 2^127 here as in ggml.
inline float e8m0_to_f32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
}

// y = d * q; bsums[j] = sum of q over elements 16 j .. 16 j + 15 (for the dot products' mins).
struct BlockQ8_K {
    float d;
    int8_t qs[kQK_K];
    int16_t bsums[kQK_K / 16];
};

// moeserve's own (GgmlType::kF8E4M3x128): y = d * e4m3(q), d the f32 block scale of
// DeepSeek's FP8 checkpoints (weight_scale_inv) as 4 little-endian bytes.
inline constexpr int kQF8 = 128;
struct BlockF8x128 {
    uint8_t d[4];
    uint8_t q[kQF8];
};

static_assert(sizeof(BlockF8x128) == 132 && sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

inline float load_f16(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
inline void store_f16(uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    p[0] = static_cast<uint8_t>(h & 0xff);
    p[1] = static_cast<uint8_t>(h >> 8);
}

inline float load_f32(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}

// Scale and min j (0-7) of a Q4_K / Q5_K block, 6 bits each, from the 12 packed bytes:
//   bytes 0-3: sc0-3 in bits 0-5, top 2 bits of sc4-7 in bits 6-7
//   bytes 4-7: m0-3 in bits 0-5, top 2 bits of m4-7 in bits 6-7
//   bytes 8-11: low nibble of sc4-7 | low nibble of m4-7 << 4
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Scale j (0-15) of a Q3_K block as stored (0-63; the value is this minus 32).
inline int q3_k_scale(const uint8_t* scales, int j) {
    const int low = (j < 8 ? scales[j] : scales[j - 8] >> 4) & 0xF;
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return low | (high << 4);
}

}  // namespace moeserve::kernels::cpu
