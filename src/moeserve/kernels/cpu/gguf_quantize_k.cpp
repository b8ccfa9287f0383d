// Quantizers of the K-quant weight types Q2_K-Q6_K (see gguf_quantize.h). Each sub-block gets a
// float scale (and, for the affine types, a min); those are quantized against the super-block's
// f16 scale(s) to the type's scale bits, and the elements are then quantized with the scales as
// they will be read back.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"

#include "moeserve/kernels/cpu/gguf_quantize_util.h"

namespace moeserve::kernels::cpu {
namespace {

using namespace gguf_quantize;  // gguf_quantize_util.h

// Affine sub-blocks of an affine K-quant: x ~ d * sc_j * q - dmin * m_j with q in
// [0, levels - 1], sc_j and m_j in [0, scale_max]. Fills the f16 d and dmin, sc, m and q
// (q[i] for element i of the super-block); `sub` elements per sub-block.
void quant_affine_k(const float* x, int sub, int levels, int scale_max, uint8_t* dp, uint8_t* dminp, int* sc, int* m,
                    int* q) {
    const int nsub = kQK_K / sub;
    float scale[16];
    float min[16];
    float max_scale = 0.0f;
    float max_min = 0.0f;
    for (int j = 0; j < nsub; ++j) {
        const float lo = std::min(0.0f, *std::min_element(x + j * sub, x + (j + 1) * sub));
        const float hi = std::max(0.0f, *std::max_element(x + j * sub, x + (j + 1) * sub));
        scale[j] = (hi - lo) / static_cast<float>(levels - 1);
        min[j] = -lo;
        max_scale = std::max(max_scale, scale[j]);
        max_min = std::max(max_min, min[j]);
    }
    store_f16(dp, max_scale / static_cast<float>(scale_max));
    store_f16(dminp, max_min / static_cast<float>(scale_max));
    const float d = load_f16(dp);
    const float dmin = load_f16(dminp);
    for (int j = 0; j < nsub; ++j) {
        // Round the scale up so the sub-block's range still fits in the levels.
        sc[j] = clampi(static_cast<int>(std::ceil(scale[j] * inverse(d))), 0, scale_max);
        m[j] = clampi(round_int(min[j] * inverse(dmin)), 0, scale_max);
        const float step = d * static_cast<float>(sc[j]);
        const float offset = dmin * static_cast<float>(m[j]);
        for (int i = j * sub; i < (j + 1) * sub; ++i) {
            q[i] = clampi(round_int((x[i] + offset) * inverse(step)), 0, levels - 1);
        }
    }
}

// Symmetric sub-blocks: x ~ d * sc_j * q with q in [-half, half - 1], sc_j in
// [scale_lo, scale_hi]. Returns the f16 d through dp.
void quant_symmetric_k(const float* x, int sub, int half, int scale_lo, int scale_hi, uint8_t* dp, int* sc, int* q) {
    const int nsub = kQK_K / sub;
    float scale[16];
    float max_abs = 0.0f;
    for (int j = 0; j < nsub; ++j) {
        scale[j] = signed_absmax(x + j * sub, sub) / static_cast<float>(-half);
        max_abs = std::max(max_abs, std::fabs(scale[j]));
    }
    store_f16(dp, max_abs / static_cast<float>(scale_hi));
    const float d = load_f16(dp);
    for (int j = 0; j < nsub; ++j) {
        sc[j] = clampi(round_int(scale[j] * inverse(d)), scale_lo, scale_hi);
        const float step = d * static_cast<float>(sc[j]);
        for (int i = j * sub; i < (j + 1) * sub; ++i) {
            q[i] = clampi(round_int(x[i] * inverse(step)), -half, half - 1);
        }
    }
}

// Element 128 h + 32 s + l of the 2-bit fields is bits 2s of qs[32 h + l] (Q2_K, Q3_K).
void pack_2bit(const int* q, uint8_t* qs) {
    std::memset(qs, 0, kQK_K / 4);
    for (int i = 0; i < kQK_K; ++i) {
        qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>((q[i] & 3) << (2 * ((i / 32) % 4)));
    }
}

void quant_q2_k(const float* x, BlockQ2_K& b) {
    int sc[16];
    int m[16];
    int q[kQK_K];
    quant_affine_k(x, 16, 4, 15, b.d, b.dmin, sc, m, q);
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(sc[j] | (m[j] << 4));
    pack_2bit(q, b.qs);
}

void quant_q3_k(const float* x, BlockQ3_K& b) {
    int sc[16];
    int q[kQK_K];
    quant_symmetric_k(x, 16, 4, -32, 31, b.d, sc, q);
    std::memset(b.scales, 0, sizeof(b.scales));
    for (int j = 0; j < 16; ++j) {
        const int s = sc[j] + 32;
        b.scales[j % 8] |= static_cast<uint8_t>((s & 0xF) << (j < 8 ? 0 : 4));
        b.scales[8 + j % 4] |= static_cast<uint8_t>((s >> 4) << (2 * (j / 4)));
    }
    int low[kQK_K];
    std::memset(b.hmask, 0, sizeof(b.hmask));
    for (int i = 0; i < kQK_K; ++i) {
        const int u = q[i] + 4;  // 0-7: the high bit set means "no -4"
        low[i] = u & 3;
        b.hmask[i % 32] |= static_cast<uint8_t>((u >> 2) << (i / 32));
    }
    pack_2bit(low, b.qs);
}

void pack_scale_min_k4(const int* sc, const int* m, uint8_t* out) {
    for (int j = 0; j < 4; ++j) {
        out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

// Q4_K / Q5_K nibbles: element 64 c + l is the low nibble of qs[32 c + l], 64 c + 32 + l the high.
void pack_k4_nibbles(const int* q, uint8_t* qs) {
    for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
            qs[32 * c + l] = static_cast<uint8_t>((q[64 * c + l] & 0xF) | ((q[64 * c + 32 + l] & 0xF) << 4));
        }
    }
}

void quant_q4_k(const float* x, BlockQ4_K& b) {
    int sc[8];
    int m[8];
    int q[kQK_K];
    quant_affine_k(x, 32, 16, 63, b.d, b.dmin, sc, m, q);
    pack_scale_min_k4(sc, m, b.scales);
    pack_k4_nibbles(q, b.qs);
}

void quant_q5_k(const float* x, BlockQ5_K& b) {
    int sc[8];
    int m[8];
    int q[kQK_K];
    quant_affine_k(x, 32, 32, 63, b.d, b.dmin, sc, m, q);
    pack_scale_min_k4(sc, m, b.scales);
    pack_k4_nibbles(q, b.qs);
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int i = 0; i < kQK_K; ++i) b.qh[i % 32] |= static_cast<uint8_t>(((q[i] >> 4) & 1) << (i / 32));
}

void quant_q6_k(const float* x, BlockQ6_K& b) {
    int sc[16];
    int q[kQK_K];
    quant_symmetric_k(x, 16, 32, -128, 127, b.d, sc, q);
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(sc[j]);
    std::memset(b.ql, 0, sizeof(b.ql));
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int i = 0; i < kQK_K; ++i) {
        const int u = q[i] + 32;
        const int h = i / 128;
        const int r = (i % 128) / 32;
        const int l = i % 32;
        b.ql[64 * h + 32 * (r % 2) + l] |= static_cast<uint8_t>((u & 0xF) << (4 * (r / 2)));
        b.qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * r));
    }
}

template <typename Block, typename F>
void each_block(const float* x, void* dst, int64_t n, F&& f) {
    auto* out = static_cast<Block*>(dst);
    for (int64_t b = 0; b < n / kQK_K; ++b) f(x + b * kQK_K, out[b]);
}

}  // namespace

// The K-quant weight types, called by quantize_gguf (gguf_quantize_ref.cpp).
void quantize_gguf_k(GgmlType type, const float* x, void* dst, int64_t n) {
    switch (type) {
        case GgmlType::kQ2_K:
            return each_block<BlockQ2_K>(x, dst, n, quant_q2_k);
        case GgmlType::kQ3_K:
            return each_block<BlockQ3_K>(x, dst, n, quant_q3_k);
        case GgmlType::kQ4_K:
            return each_block<BlockQ4_K>(x, dst, n, quant_q4_k);
        case GgmlType::kQ5_K:
            return each_block<BlockQ5_K>(x, dst, n, quant_q5_k);
        case GgmlType::kQ6_K:
            return each_block<BlockQ6_K>(x, dst, n, quant_q6_k);
        default:
            MOESERVE_CHECK(false, "no quantizer for {}", ggml_type_name(type));
    }
}

}  // namespace moeserve::kernels::cpu
