// Scalar GGUF dot products (see gguf_dot.h): the integer sum of each block is exact, then the
// scales are applied in f32 in one fixed order, which the AVX2 K-quant code repeats (this file
// and gguf_dot_avx2.cpp are built with -ffp-contract=off, so both round alike).
#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot.h"

namespace moeserve::kernels::cpu {
namespace {

int nibble(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; }

const uint8_t* min_block_qh(const BlockQ4_1& /*b*/) { return nullptr; }
const uint8_t* min_block_qh(const BlockQ5_1& b) { return b.qh; }

float dot_q4_0(int64_t nb, const BlockQ4_0* w, const BlockQ8_0* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum = 0;
        for (int i = 0; i < kQK4_0; ++i) isum += (nibble(w[b].qs, i) - 8) * a[b].qs[i];
        sum += (load_f16(w[b].d) * load_f16(a[b].d)) * static_cast<float>(isum);
    }
    return sum;
}

// MXFP4: the doubled e2m1 values (integers) times q8, then d_w (2^(e - 128)) * d_a, as llama.cpp.
float dot_mxfp4(int64_t nb, const BlockMXFP4* w, const BlockQ8_0* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum = 0;
        for (int i = 0; i < kQK4_0; ++i) isum += kMxfp4Values[nibble(w[b].qs, i)] * a[b].qs[i];
        sum += (e8m0_to_f32_half(w[b].e) * load_f16(a[b].d)) * static_cast<float>(isum);
    }
    return sum;
}

// Element i of a Q5_0 / Q5_1 block: its nibble and bit i of qh (little-endian u32) as bit 4.
int five_bits(const uint8_t* qs, const uint8_t* qh, int i) {
    return nibble(qs, i) | (((qh[i / 8] >> (i % 8)) & 1) << 4);
}

float dot_q5_0(int64_t nb, const BlockQ5_0* w, const BlockQ8_0* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum = 0;
        for (int i = 0; i < kQK4_0; ++i) isum += (five_bits(w[b].qs, w[b].qh, i) - 16) * a[b].qs[i];
        sum += (load_f16(w[b].d) * load_f16(a[b].d)) * static_cast<float>(isum);
    }
    return sum;
}

// Q4_1 (qh null) and Q5_1, y = d * q + m: d_w d_a sum q * q8 + m d_a sum q8. llama.cpp pairs these
// with q8_1, which is q8_0 plus f16(d_a * sum q8); the sum is taken here in f32 instead (the same
// quantized activations, one f16 rounding fewer).
template <typename Block>
float dot_with_min(int64_t nb, const Block* w, const BlockQ8_0* a, bool five) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum = 0;
        int asum = 0;
        for (int i = 0; i < kQK4_0; ++i) {
            const int q = five ? five_bits(w[b].qs, min_block_qh(w[b]), i) : nibble(w[b].qs, i);
            isum += q * a[b].qs[i];
            asum += a[b].qs[i];
        }
        const float da = load_f16(a[b].d);
        sum += (load_f16(w[b].d) * da) * static_cast<float>(isum) + (load_f16(w[b].m) * da) * static_cast<float>(asum);
    }
    return sum;
}

float dot_q8_0(int64_t nb, const BlockQ8_0* w, const BlockQ8_0* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum = 0;
        for (int i = 0; i < kQK8_0; ++i) isum += w[b].qs[i] * a[b].qs[i];
        sum += (load_f16(w[b].d) * load_f16(a[b].d)) * static_cast<float>(isum);
    }
    return sum;
}

// Q4_K (qh null) and Q5_K: sum_j sc_j * sum_l q * q8, and sum_j m_j * (bsums of sub-block j).
float dot_k4(const uint8_t* d, const uint8_t* dmin, const uint8_t* scales, const uint8_t* qh, const uint8_t* qs,
             const BlockQ8_K& a, float sum) {
    int isum = 0;
    int isum_min = 0;
    for (int j = 0; j < 8; ++j) {
        uint8_t sc = 0;
        uint8_t m = 0;
        unpack_scale_min_k4(j, scales, sc, m);
        int sub = 0;
        for (int l = 0; l < 32; ++l) {
            int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
            if (qh != nullptr) q |= ((qh[l] >> j) & 1) << 4;
            sub += q * a.qs[32 * j + l];
        }
        isum += sc * sub;
        isum_min += m * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
    }
    sum += (load_f16(d) * a.d) * static_cast<float>(isum);
    sum -= (load_f16(dmin) * a.d) * static_cast<float>(isum_min);
    return sum;
}

float dot_q6_k(int64_t nb, const BlockQ6_K* w, const BlockQ8_K* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            int sub = 0;
            for (int i = 16 * j; i < 16 * j + 16; ++i) {
                const int h = i / 128;
                const int r = (i % 128) / 32;
                const int l = i % 32;
                const int low = (w[b].ql[64 * h + 32 * (r % 2) + l] >> (4 * (r / 2))) & 0xF;
                const int high = (w[b].qh[32 * h + l] >> (2 * r)) & 3;
                sub += ((low | (high << 4)) - 32) * a[b].qs[i];
            }
            isum += w[b].scales[j] * sub;
        }
        sum += (load_f16(w[b].d) * a[b].d) * static_cast<float>(isum);
    }
    return sum;
}

// The 2-bit value of element i (0-255) of a Q2_K / Q3_K block: bits 2s..2s+1 of qs[32 h + l]
// for i = 128 h + 32 s + l.
int two_bits(const uint8_t* qs, int i) { return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3; }

// Q2_K, y = d (sc_j & 15) q - dmin (sc_j >> 4) over 16 sub-blocks of 16: sum_j (sc_j & 15) *
// sum q * q8, and sum_j (sc_j >> 4) * bsums_j.
float dot_q2_k(int64_t nb, const BlockQ2_K* w, const BlockQ8_K* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum = 0;
        int isum_min = 0;
        for (int j = 0; j < 16; ++j) {
            int sub = 0;
            for (int i = 16 * j; i < 16 * j + 16; ++i) sub += two_bits(w[b].qs, i) * a[b].qs[i];
            isum += (w[b].scales[j] & 0xF) * sub;
            isum_min += (w[b].scales[j] >> 4) * a[b].bsums[j];
        }
        sum += (load_f16(w[b].d) * a[b].d) * static_cast<float>(isum);
        sum -= (load_f16(w[b].dmin) * a[b].d) * static_cast<float>(isum_min);
    }
    return sum;
}

// Q3_K, y = d (scale_j - 32) (q - (hbit ? 0 : 4)): sum_j (scale_j - 32) * sum q3 * q8.
float dot_q3_k(int64_t nb, const BlockQ3_K* w, const BlockQ8_K* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            int sub = 0;
            for (int i = 16 * j; i < 16 * j + 16; ++i) {
                const int high = (w[b].hmask[i % 32] >> (i / 32)) & 1;
                sub += (two_bits(w[b].qs, i) - (high != 0 ? 0 : 4)) * a[b].qs[i];
            }
            isum += (q3_k_scale(w[b].scales, j) - 32) * sub;
        }
        sum += (load_f16(w[b].d) * a[b].d) * static_cast<float>(isum);
    }
    return sum;
}

// FP8 rows with f32 activations: the dequantized weights d * e4m3(q) times a, summed per block in
// order, then the blocks' sums (the SIMD code sums the same products in lanes instead).
float dot_f8x128(int64_t nb, const BlockF8x128* w, const float* a) {
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const float d = load_f32(w[b].d);
        float block = 0.0f;
        for (int i = 0; i < kQF8; ++i) block += (d * f8e4m3_to_f32(w[b].q[i])) * a[b * kQF8 + i];
        sum += block;
    }
    return sum;
}

}  // namespace

bool gguf_dot_supported(GgmlType weight) {
    switch (weight) {
        case GgmlType::kQ4_0:
        case GgmlType::kQ4_1:
        case GgmlType::kQ5_0:
        case GgmlType::kQ5_1:
        case GgmlType::kQ8_0:
        case GgmlType::kMXFP4:
        case GgmlType::kQ2_K:
        case GgmlType::kQ3_K:
        case GgmlType::kQ4_K:
        case GgmlType::kQ5_K:
        case GgmlType::kQ6_K:
        case GgmlType::kF8E4M3x128:
            return true;
        default:
            return false;
    }
}

GgmlType gguf_dot_activation_type(GgmlType weight) {
    MOESERVE_CHECK(gguf_dot_supported(weight), "no GGUF dot product for {}", ggml_type_name(weight));
    if (weight == GgmlType::kF8E4M3x128) return GgmlType::kF32;
    return ggml_traits(weight).block_size == kQK_K ? GgmlType::kQ8_K : GgmlType::kQ8_0;
}

float gguf_vec_dot_ref(GgmlType type, int64_t n, const void* w, const void* a) {
    const int64_t bs = ggml_traits(type).block_size;
    MOESERVE_CHECK(gguf_dot_supported(type) && n >= 0 && n % bs == 0, "type={} n={}", ggml_type_name(type), n);
    const int64_t nb = n / bs;
    const auto* q8k = static_cast<const BlockQ8_K*>(a);
    float sum = 0.0f;
    switch (type) {
        case GgmlType::kQ4_0:
            return dot_q4_0(nb, static_cast<const BlockQ4_0*>(w), static_cast<const BlockQ8_0*>(a));
        case GgmlType::kQ4_1:
            return dot_with_min(nb, static_cast<const BlockQ4_1*>(w), static_cast<const BlockQ8_0*>(a), false);
        case GgmlType::kQ5_0:
            return dot_q5_0(nb, static_cast<const BlockQ5_0*>(w), static_cast<const BlockQ8_0*>(a));
        case GgmlType::kQ5_1:
            return dot_with_min(nb, static_cast<const BlockQ5_1*>(w), static_cast<const BlockQ8_0*>(a), true);
        case GgmlType::kQ8_0:
            return dot_q8_0(nb, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(a));
        case GgmlType::kMXFP4:
            return dot_mxfp4(nb, static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(a));
        case GgmlType::kQ2_K:
            return dot_q2_k(nb, static_cast<const BlockQ2_K*>(w), q8k);
        case GgmlType::kQ3_K:
            return dot_q3_k(nb, static_cast<const BlockQ3_K*>(w), q8k);
        case GgmlType::kQ4_K:
            for (int64_t b = 0; b < nb; ++b) {
                const BlockQ4_K& x = static_cast<const BlockQ4_K*>(w)[b];
                sum = dot_k4(x.d, x.dmin, x.scales, nullptr, x.qs, q8k[b], sum);
            }
            return sum;
        case GgmlType::kQ5_K:
            for (int64_t b = 0; b < nb; ++b) {
                const BlockQ5_K& x = static_cast<const BlockQ5_K*>(w)[b];
                sum = dot_k4(x.d, x.dmin, x.scales, x.qh, x.qs, q8k[b], sum);
            }
            return sum;
        case GgmlType::kQ6_K:
            return dot_q6_k(nb, static_cast<const BlockQ6_K*>(w), q8k);
        case GgmlType::kF8E4M3x128:
            return dot_f8x128(nb, static_cast<const BlockF8x128*>(w), static_cast<const float*>(a));
        default:
            return 0.0f;  // unreachable: checked above
    }
}

void gguf_matvec(GgmlType type, int64_t rows, int64_t n, const void* w, const void* a, float* out) {
    const auto row_bytes = static_cast<int64_t>(ggml_nbytes(type, static_cast<uint64_t>(n)).value_or(0));
    const auto* base = static_cast<const uint8_t*>(w);
    for (int64_t r = 0; r < rows; ++r) out[r] = gguf_vec_dot(type, n, base + r * row_bytes, a);
}

}  // namespace moeserve::kernels::cpu
