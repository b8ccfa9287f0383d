// Dequantization of GGUF blocks (see gguf_dequant.h). NOTE(#27): each product and sum is its own
// float32 operation in gguf-py's order (for example Q4_K: (d * sc) * q - (dmin * m)), and this
// file is built with -ffp-contract=off (kernels/CMakeLists.txt), so that no multiply-add gets
// fused and the results match numpy bit for bit.
#include "moeserve/kernels/cpu/gguf_dequant.h"

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_blocks.h"

namespace moeserve::kernels::cpu {
namespace {

template <typename Block, typename F>
void for_blocks(const void* src, int64_t n, int block_size, F&& f) {
    const auto* blocks = static_cast<const Block*>(src);
    for (int64_t b = 0; b < n / block_size; ++b) f(blocks[b], b * block_size);
}

// The nibble of element i (0-31) of a 32-element block: 0-15 low nibbles, 16-31 high nibbles.
inline int nibble(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; }

inline int q5_bit(const uint8_t* qh, int i) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return static_cast<int>((h >> i) & 1u);
}

void dequant_q4_0(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ4_0>(src, n, kQK4_0, [&](const BlockQ4_0& b, int64_t o) {
        const float d = load_f16(b.d);
        for (int i = 0; i < kQK4_0; ++i) y[o + i] = d * static_cast<float>(nibble(b.qs, i) - 8);
    });
}

void dequant_q4_1(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ4_1>(src, n, kQK4_0, [&](const BlockQ4_1& b, int64_t o) {
        const float d = load_f16(b.d);
        const float m = load_f16(b.m);
        for (int i = 0; i < kQK4_0; ++i) y[o + i] = d * static_cast<float>(nibble(b.qs, i)) + m;
    });
}

void dequant_q5_0(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ5_0>(src, n, kQK4_0, [&](const BlockQ5_0& b, int64_t o) {
        const float d = load_f16(b.d);
        for (int i = 0; i < kQK4_0; ++i) {
            y[o + i] = d * static_cast<float>((nibble(b.qs, i) | (q5_bit(b.qh, i) << 4)) - 16);
        }
    });
}

void dequant_q5_1(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ5_1>(src, n, kQK4_0, [&](const BlockQ5_1& b, int64_t o) {
        const float d = load_f16(b.d);
        const float m = load_f16(b.m);
        for (int i = 0; i < kQK4_0; ++i) {
            y[o + i] = d * static_cast<float>(nibble(b.qs, i) | (q5_bit(b.qh, i) << 4)) + m;
        }
    });
}

void dequant_q8_0(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ8_0>(src, n, kQK8_0, [&](const BlockQ8_0& b, int64_t o) {
        const float d = load_f16(b.d);
        for (int i = 0; i < kQK8_0; ++i) y[o + i] = static_cast<float>(b.qs[i]) * d;
    });
}

// y = d * kvalue, gguf-py's order (the f32 scale times the int8 value widened to f32).
void dequant_mxfp4(const void* src, float* y, int64_t n) {
    for_blocks<BlockMXFP4>(src, n, kQK4_0, [&](const BlockMXFP4& b, int64_t o) {
        const float d = e8m0_to_f32_half(b.e);
        for (int i = 0; i < kQK4_0; ++i) y[o + i] = d * static_cast<float>(kMxfp4Values[nibble(b.qs, i)]);
    });
}

void dequant_q2_k(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ2_K>(src, n, kQK_K, [&](const BlockQ2_K& b, int64_t o) {
        const float d = load_f16(b.d);
        const float dmin = load_f16(b.dmin);
        for (int i = 0; i < kQK_K; ++i) {
            const int j = i / 16;
            const float dl = d * static_cast<float>(b.scales[j] & 0xF);
            const float ml = dmin * static_cast<float>(b.scales[j] >> 4);
            const int q = (b.qs[32 * (i / 128) + i % 32] >> (2 * ((i / 32) % 4))) & 3;
            y[o + i] = dl * static_cast<float>(q) - ml;
        }
    });
}

void dequant_q3_k(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ3_K>(src, n, kQK_K, [&](const BlockQ3_K& b, int64_t o) {
        const float d = load_f16(b.d);
        for (int i = 0; i < kQK_K; ++i) {
            const float dl = d * static_cast<float>(q3_k_scale(b.scales, i / 16) - 32);
            const int low = (b.qs[32 * (i / 128) + i % 32] >> (2 * ((i / 32) % 4))) & 3;
            const int high = (b.hmask[i % 32] >> (i / 32)) & 1;
            y[o + i] = dl * static_cast<float>(low - (high ? 0 : 4));
        }
    });
}

// Q4_K and Q5_K share the scales; `qh` is null for Q4_K.
void dequant_k4(const uint8_t* dp, const uint8_t* dminp, const uint8_t* scales, const uint8_t* qh, const uint8_t* qs,
                float* y) {
    const float d = load_f16(dp);
    const float dmin = load_f16(dminp);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc = 0;
        uint8_t m = 0;
        unpack_scale_min_k4(j, scales, sc, m);
        const float d1 = d * static_cast<float>(sc);
        const float m1 = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
            int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
            if (qh != nullptr) q |= ((qh[l] >> j) & 1) << 4;
            y[32 * j + l] = d1 * static_cast<float>(q) - m1;
        }
    }
}

void dequant_q4_k(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ4_K>(
        src, n, kQK_K, [&](const BlockQ4_K& b, int64_t o) { dequant_k4(b.d, b.dmin, b.scales, nullptr, b.qs, y + o); });
}

void dequant_q5_k(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ5_K>(src, n, kQK_K,
                          [&](const BlockQ5_K& b, int64_t o) { dequant_k4(b.d, b.dmin, b.scales, b.qh, b.qs, y + o); });
}

void dequant_q6_k(const void* src, float* y, int64_t n) {
    for_blocks<BlockQ6_K>(src, n, kQK_K, [&](const BlockQ6_K& b, int64_t o) {
        const float d = load_f16(b.d);
        for (int i = 0; i < kQK_K; ++i) {
            const int h = i / 128;
            const int r = (i % 128) / 32;
            const int l = i % 32;
            const int low = (b.ql[64 * h + 32 * (r % 2) + l] >> (4 * (r / 2))) & 0xF;
            const int high = (b.qh[32 * h + l] >> (2 * r)) & 3;
            const int8_t scale = b.scales[i / 16];
            const float ds = d * static_cast<float>(scale);
            y[o + i] = ds * static_cast<float>((low | (high << 4)) - 32);
        }
    });
}

void dequant_q8_k(const void* src, float* y, int64_t n) {
    const auto* bytes = static_cast<const uint8_t*>(src);
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        BlockQ8_K block;  // copied: a block in a file need not be 4-byte aligned
        std::memcpy(&block, bytes + b * static_cast<int64_t>(sizeof(BlockQ8_K)), sizeof(BlockQ8_K));
        for (int i = 0; i < kQK_K; ++i) y[b * kQK_K + i] = block.d * static_cast<float>(block.qs[i]);
    }
}

void dequant_plain(GgmlType type, const void* src, float* y, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    if (type == GgmlType::kF32) {
        if (n > 0) std::memcpy(y, src, static_cast<size_t>(n) * sizeof(float));  // null pointers when n is 0
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const auto h = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
        y[i] = type == GgmlType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
}

// y = d * e4m3(q): the f32 product, as the safetensors loader dequantizes DeepSeek's FP8 blocks.
void dequant_f8x128(const void* src, float* y, int64_t n) {
    const auto* blocks = static_cast<const BlockF8x128*>(src);
    for (int64_t b = 0; b < n / kQF8; ++b) {
        const float d = load_f32(blocks[b].d);
        for (int i = 0; i < kQF8; ++i) y[b * kQF8 + i] = d * f8e4m3_to_f32(blocks[b].q[i]);
    }
}

}  // namespace

void dequantize_gguf(GgmlType type, const void* src, float* dst, int64_t n) {
    const GgmlTypeTraits traits = ggml_traits(type);
    MOESERVE_CHECK(traits.supported && n >= 0 && n % traits.block_size == 0, "type={} n={}", traits.name, n);
    switch (type) {
        case GgmlType::kF32:
        case GgmlType::kF16:
        case GgmlType::kBF16:
            return dequant_plain(type, src, dst, n);
        case GgmlType::kQ4_0:
            return dequant_q4_0(src, dst, n);
        case GgmlType::kQ4_1:
            return dequant_q4_1(src, dst, n);
        case GgmlType::kQ5_0:
            return dequant_q5_0(src, dst, n);
        case GgmlType::kQ5_1:
            return dequant_q5_1(src, dst, n);
        case GgmlType::kQ8_0:
            return dequant_q8_0(src, dst, n);
        case GgmlType::kMXFP4:
            return dequant_mxfp4(src, dst, n);
        case GgmlType::kQ2_K:
            return dequant_q2_k(src, dst, n);
        case GgmlType::kQ3_K:
            return dequant_q3_k(src, dst, n);
        case GgmlType::kQ4_K:
            return dequant_q4_k(src, dst, n);
        case GgmlType::kQ5_K:
            return dequant_q5_k(src, dst, n);
        case GgmlType::kQ6_K:
            return dequant_q6_k(src, dst, n);
        case GgmlType::kQ8_K:
            return dequant_q8_k(src, dst, n);
        case GgmlType::kF8E4M3x128:
            return dequant_f8x128(src, dst, n);
        default:
            MOESERVE_CHECK(false, "type {} is marked supported but has no dequantizer", traits.name);
    }
}

}  // namespace moeserve::kernels::cpu
