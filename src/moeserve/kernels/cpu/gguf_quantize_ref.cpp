// Quantizers of the GGUF block types (see gguf_quantize.h). The 32-element types follow the
// classic rule (Q4_0 / Q5_0: the element of largest magnitude maps to the most negative level;
// Q4_1 / Q5_1: min and max span the levels). The K-quants compute a float scale (and min) per
// sub-block, then quantize those to the block's 4, 6 or 8 bits against the super-block's f16
// scale, and quantize the elements with the scales as stored, so every level is reachable.
#include "moeserve/kernels/cpu/gguf_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_blocks.h"

#include "moeserve/kernels/cpu/gguf_quantize_util.h"

namespace moeserve::kernels::cpu {
namespace {

using namespace gguf_quantize;  // gguf_quantize_util.h
// Rounds half to even (the default rounding mode), as ggml's nearest_int and _mm256_round_ps.
inline int round_even(float v) { return static_cast<int>(std::nearbyint(v)); }

void set_nibbles(uint8_t* qs, const int* q) {
    for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>(q[i] | (q[i + 16] << 4));
}

void set_q5_high(uint8_t* qh, const int* q) {
    uint32_t h = 0;
    for (int i = 0; i < 32; ++i) h |= static_cast<uint32_t>((q[i] >> 4) & 1) << i;
    std::memcpy(qh, &h, 4);
}

// Symmetric 32-element block with levels [-half, half - 1]: q + half stored. Returns d.
float quant_symmetric32(const float* x, int half, int* q) {
    const float max = signed_absmax(x, 32);
    uint8_t dh[2];
    store_f16(dh, max / static_cast<float>(-half));
    const float d = load_f16(dh);
    const float id = inverse(d);
    for (int i = 0; i < 32; ++i) q[i] = clampi(round_int(x[i] * id) + half, 0, 2 * half - 1);
    return d;
}

// Affine 32-element block: x ~ d * q + m with q in [0, levels - 1]. Writes d and m as f16.
void quant_affine32(const float* x, int levels, uint8_t* dp, uint8_t* mp, int* q) {
    const float lo = *std::min_element(x, x + 32);
    const float hi = *std::max_element(x, x + 32);
    store_f16(dp, (hi - lo) / static_cast<float>(levels - 1));
    store_f16(mp, lo);
    const float id = inverse(load_f16(dp));
    const float m = load_f16(mp);
    for (int i = 0; i < 32; ++i) q[i] = clampi(round_int((x[i] - m) * id), 0, levels - 1);
}

void quant_q4_0(const float* x, BlockQ4_0& b) {
    int q[32];
    store_f16(b.d, quant_symmetric32(x, 8, q));
    set_nibbles(b.qs, q);
}
void quant_q4_1(const float* x, BlockQ4_1& b) {
    int q[32];
    quant_affine32(x, 16, b.d, b.m, q);
    set_nibbles(b.qs, q);
}
void quant_q5_0(const float* x, BlockQ5_0& b) {
    int q[32];
    store_f16(b.d, quant_symmetric32(x, 16, q));
    int low[32];
    for (int i = 0; i < 32; ++i) low[i] = q[i] & 0xF;
    set_nibbles(b.qs, low);
    set_q5_high(b.qh, q);
}
void quant_q5_1(const float* x, BlockQ5_1& b) {
    int q[32];
    quant_affine32(x, 32, b.d, b.m, q);
    int low[32];
    for (int i = 0; i < 32; ++i) low[i] = q[i] & 0xF;
    set_nibbles(b.qs, low);
    set_q5_high(b.qh, q);
}

// The e8m0 exponent gguf-py's MXFP4.quantize_blocks picks for a block whose largest magnitude is
// amax: floor(log2(amax)) - 2 + 127 in float32, the log2 a float32 too. The float of the double
// log2 gives numpy's float32 log2 on every golden (quant_MXFP4.bin), the float just below each
// power of two included, where both round up to the power's exponent. The cast to uint8 is
// numpy's on x86: through int32, keeping the low byte, so an amax below 2^-125 wraps (2^-149
// gives 232); 0 when amax is 0.
uint8_t mxfp4_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    const float e = std::floor(static_cast<float>(std::log2(static_cast<double>(amax)))) - 2.0f + 127.0f;
    if (!std::isfinite(e)) return 0;  // an infinite amax: x86's int32 conversion gives 0x80000000
    return static_cast<uint8_t>(static_cast<uint32_t>(static_cast<int32_t>(e)) & 0xFFu);
}

// gguf-py's MXFP4.quantize_blocks: each element takes the first value (lowest index) of least
// |d * kvalue - x| in float32, d = e8m0_to_f32_half(e); the same bytes for finite inputs.
void quant_mxfp4(const float* x, BlockMXFP4& b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    b.e = mxfp4_exponent(amax);
    const float d = e8m0_to_f32_half(b.e);
    int q[32];
    for (int i = 0; i < 32; ++i) {
        float best_err = std::fabs(d * static_cast<float>(kMxfp4Values[0]) - x[i]);
        q[i] = 0;
        for (int k = 1; k < 16; ++k) {
            const float err = std::fabs(d * static_cast<float>(kMxfp4Values[k]) - x[i]);
            if (err < best_err) {
                best_err = err;
                q[i] = k;
            }
        }
    }
    set_nibbles(b.qs, q);
}

// llama.cpp's x86 quantize_row_q8_0 (what its CPU backend quantizes activations with):
// d = amax / 127 stored as f16, q = round_half_even(x * (127 / amax)).
void quant_q8_0(const float* x, BlockQ8_0& b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(round_even(x[i] * id));
    store_f16(b.d, amax / 127.0f);
}

// llama.cpp's quantize_row_q8_K_ref: the element of largest magnitude maps to -127.
void quant_q8_k(const float* x, BlockQ8_K& b) {
    const float max = signed_absmax(x, kQK_K);
    std::memset(&b, 0, sizeof(b));
    if (max == 0.0f) return;
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQK_K; ++i) b.qs[i] = static_cast<int8_t>(std::min(127, round_even(iscale * x[i])));
    for (int j = 0; j < kQK_K / 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b.qs[16 * j + i];
        b.bsums[j] = static_cast<int16_t>(sum);
    }
    b.d = 1.0f / iscale;
}

}  // namespace

void quantize_gguf_k(GgmlType type, const float* x, void* dst, int64_t n);  // gguf_quantize_k.cpp

void quantize_gguf(GgmlType type, const float* x, void* dst, int64_t n) {
    const GgmlTypeTraits traits = ggml_traits(type);
    MOESERVE_CHECK(traits.supported && n >= 0 && n % traits.block_size == 0, "type={} n={}", traits.name, n);
    auto* out = static_cast<uint8_t*>(dst);
    const int64_t nb = n / traits.block_size;
    const auto at = [&](int64_t b) { return out + b * static_cast<int64_t>(traits.type_size); };
    const auto xb = [&](int64_t b) { return x + b * traits.block_size; };
    switch (type) {
        case GgmlType::kF32:
            if (n > 0) std::memcpy(dst, x, static_cast<size_t>(n) * 4);  // x may be null when n is 0
            return;
        case GgmlType::kF16:
            for (int64_t i = 0; i < n; ++i) store_f16(out + 2 * i, x[i]);
            return;
        case GgmlType::kBF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_bf16(x[i]);
                std::memcpy(out + 2 * i, &h, 2);
            }
            return;
        case GgmlType::kQ4_0:
            for (int64_t b = 0; b < nb; ++b) quant_q4_0(xb(b), *reinterpret_cast<BlockQ4_0*>(at(b)));
            return;
        case GgmlType::kQ4_1:
            for (int64_t b = 0; b < nb; ++b) quant_q4_1(xb(b), *reinterpret_cast<BlockQ4_1*>(at(b)));
            return;
        case GgmlType::kQ5_0:
            for (int64_t b = 0; b < nb; ++b) quant_q5_0(xb(b), *reinterpret_cast<BlockQ5_0*>(at(b)));
            return;
        case GgmlType::kQ5_1:
            for (int64_t b = 0; b < nb; ++b) quant_q5_1(xb(b), *reinterpret_cast<BlockQ5_1*>(at(b)));
            return;
        case GgmlType::kMXFP4:
            for (int64_t b = 0; b < nb; ++b) quant_mxfp4(xb(b), *reinterpret_cast<BlockMXFP4*>(at(b)));
            return;
        case GgmlType::kQ8_0:
            for (int64_t b = 0; b < nb; ++b) quant_q8_0(xb(b), *reinterpret_cast<BlockQ8_0*>(at(b)));
            return;
        case GgmlType::kQ8_K: {
            for (int64_t b = 0; b < nb; ++b) {
                BlockQ8_K block;  // dst need not be 4-byte aligned
                quant_q8_k(xb(b), block);
                std::memcpy(at(b), &block, sizeof(block));
            }
            return;
        }
        case GgmlType::kF8E4M3x128:
            for (int64_t b = 0; b < nb; ++b) {
                const float d = store_f32_row_e4m3(at(b) + 4, xb(b), kQF8);
                std::memcpy(at(b), &d, 4);
            }
            return;
        default:
            quantize_gguf_k(type, x, dst, n);
            return;
    }
}

}  // namespace moeserve::kernels::cpu
