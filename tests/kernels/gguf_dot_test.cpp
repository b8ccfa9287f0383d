// gguf_vec_dot at every ISA level against gguf_vec_dot_ref (AVX2's K-quants bit for bit, the
// rest within f32 reassociation), and the reference against the float64 dot product of the
// dequantized weights and activations (dequantize_gguf, itself checked against gguf-py).
// Weights are both quantized floats and raw random blocks (every quant bit pattern, -128 in
// Q8_0, every Q6_K scale) with finite f16 scales; rows start at odd addresses.
#include "moeserve/kernels/cpu/gguf_dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/gguf_test_blocks.h"
#include "kernels/kernel_test_util.h"
#include "moeserve/core/dtype.h"
#include "moeserve/core/ggml_type.h"
#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dequant.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"

namespace moeserve::kernels::cpu {
namespace {

struct Exact {
    double dot = 0.0;
    double magnitude = 0.0;  // sum |w_i * a_i|
};

Exact f64_dot(GgmlType type, int64_t n, const void* w, const void* a) {
    std::vector<float> wf(static_cast<size_t>(n));
    std::vector<float> af(static_cast<size_t>(n));
    dequantize_gguf(type, w, wf.data(), n);
    dequantize_gguf(gguf_dot_activation_type(type), a, af.data(), n);
    Exact e;
    for (int64_t i = 0; i < n; ++i) {
        const double p = static_cast<double>(wf[static_cast<size_t>(i)]) * af[static_cast<size_t>(i)];
        e.dot += p;
        e.magnitude += std::fabs(p);
    }
    return e;
}

class GgufDotTest : public testing::TestWithParam<GgmlType> {};

TEST_P(GgufDotTest, EveryIsaMatchesTheReferenceAndTheF64Dot) {
    const GgmlType type = GetParam();
    const int64_t bs = ggml_traits(type).block_size;
    const bool k_quant = bs == kQK_K;
    // FP8 (W8A16) sums every product in f32, where the integer types sum each block exactly first
    const double tolerance = type == GgmlType::kF8E4M3x128 ? 1e-5 : 2e-6;
    std::mt19937 rng(27);
    std::vector<int64_t> sizes = {0, bs, 2 * bs, 3 * bs, 8 * bs, 768, 2048, 7168};
    for (const int64_t n : sizes) {
        if (n % bs != 0) continue;
        for (const bool raw : {false, true}) {
            SCOPED_TRACE(testing::Message() << "n=" << n << (raw ? " raw blocks" : " quantized floats"));
            const std::string w = weight_row(type, n, raw, rng);
            const std::vector<uint64_t> a = activations(type, n, rng);
            const float ref = gguf_vec_dot_ref(type, n, w.data() + 1, a.data());
            const Exact e = f64_dot(type, n, w.data() + 1, a.data());
            EXPECT_NEAR(ref, e.dot, 1e-5 * e.magnitude + 1e-30);
            test::for_each_isa([&](cpu::Isa isa) {
                const float got = gguf_vec_dot(type, n, w.data() + 1, a.data());
                // AVX2's K-quants have the reference's bits; AVX-512 sums the super-blocks in lanes
                if (k_quant && isa < cpu::Isa::kAvx512) {
                    EXPECT_EQ(f32_bits(got), f32_bits(ref)) << got << " vs " << ref;
                } else {
                    EXPECT_NEAR(got, ref, tolerance * e.magnitude + 1e-30);
                }
            });
        }
    }
}

TEST_P(GgufDotTest, MatvecIsOneDotPerRow) {
    const GgmlType type = GetParam();
    const int64_t n = 2 * kQK_K;
    std::mt19937 rng(5);
    std::string rows;
    for (int r = 0; r < 3; ++r) rows += weight_row(type, n, r == 1, rng).substr(1);
    const std::vector<uint64_t> a = activations(type, n, rng);
    const size_t row_bytes = rows.size() / 3;
    test::for_each_isa([&](cpu::Isa) {
        float out[3] = {};
        gguf_matvec(type, 3, n, rows.data(), a.data(), out);
        for (int r = 0; r < 3; ++r) EXPECT_EQ(out[r], gguf_vec_dot(type, n, rows.data() + r * row_bytes, a.data()));
    });
}

// Every tile shape gives each (weight row, activation row) pair the one-pair kernel's bits, for odd
// block counts too, with rows at odd addresses and strides; so do the tiles over widened rows.
TEST_P(GgufDotTest, TilesHaveThePairKernelsBits) {
    const GgmlType type = GetParam();
    const int64_t bs = ggml_traits(type).block_size;
    std::mt19937 rng(29);
    for (const int64_t n : {bs, 3 * bs, int64_t{2 * kQK_K}, 4 * kQK_K + (bs == kQK_K ? 0 : bs)}) {
        const size_t row_bytes = *ggml_nbytes(type, static_cast<uint64_t>(n));
        const size_t stride = row_bytes + 5;
        std::string rows(1 + stride * kGgufTileRows, '\0');
        for (int r = 0; r < kGgufTileRows; ++r) {
            const std::string row = weight_row(type, n, r % 2 == 1, rng);
            std::memcpy(&rows[1 + stride * static_cast<size_t>(r)], row.data() + 1, row_bytes);
        }
        std::vector<std::vector<uint64_t>> acts;
        const uint8_t* a[kGgufTileCols];
        for (int c = 0; c < kGgufTileCols; ++c) acts.push_back(activations(type, n, rng));
        for (int c = 0; c < kGgufTileCols; ++c)
            a[c] = reinterpret_cast<const uint8_t*>(acts[static_cast<size_t>(c)].data());
        const auto* w = reinterpret_cast<const uint8_t*>(rows.data() + 1);
        test::for_each_isa([&](cpu::Isa) {
            const GgufTiles tiles(type);
            // the rows as the tiles take them (prepared where this level's tiles want that)
            const size_t prepared_bytes = tiles.prepared_row_bytes(n / bs);
            std::vector<std::vector<uint64_t>> prepared(kGgufTileCols);
            const uint8_t* rows_in[kGgufTileCols];
            for (int c = 0; c < kGgufTileCols; ++c) {
                rows_in[c] = a[c];
                if (prepared_bytes == 0) continue;
                prepared[static_cast<size_t>(c)].resize(prepared_bytes / 8 + 1);
                tiles.prepare(a[c], n / bs, prepared[static_cast<size_t>(c)].data());
                rows_in[c] = reinterpret_cast<const uint8_t*>(prepared[static_cast<size_t>(c)].data());
            }
            for (int nr = 1; nr <= kGgufTileRows; ++nr) {
                for (int nc = 1; nc <= kGgufTileCols; ++nc) {
                    SCOPED_TRACE(testing::Message() << "n=" << n << " tile " << nr << "x" << nc);
                    float out[kGgufTileCols * 5] = {};
                    tiles.run(n / bs, nr, nc, w, stride, rows_in, out, 5);
                    for (int c = 0; c < nc; ++c) {
                        for (int r = 0; r < nr; ++r) {
                            const float one = gguf_vec_dot(type, n, w + stride * static_cast<size_t>(r), a[c]);
                            EXPECT_EQ(f32_bits(out[c * 5 + r]), f32_bits(one)) << out[c * 5 + r] << " vs " << one;
                        }
                    }
                    if (!tiles.widens()) continue;
                    // the same tile over the rows widened once (FP8's many-token path)
                    std::vector<float> widened(static_cast<size_t>(nr * n));
                    tiles.widen(n / bs, nr, w, stride, widened.data());
                    float again[kGgufTileCols * 5] = {};
                    tiles.run_widened(n / bs, nr, nc, widened.data(), n, rows_in, again, 5);
                    for (int c = 0; c < nc; ++c) {
                        for (int r = 0; r < nr; ++r) EXPECT_EQ(f32_bits(again[c * 5 + r]), f32_bits(out[c * 5 + r]));
                    }
                }
            }
        });
    }
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, GgufDotTest,
                         testing::Values(GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                         GgmlType::kQ8_0, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                                         GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kF8E4M3x128, GgmlType::kMXFP4),
                         [](const auto& p) { return std::string(ggml_type_name(p.param)); });

// ---- Q2_K / Q3_K blocks at the edges of their fields ----

// Where a Q2_K / Q3_K block keeps its packed sub-block scales, its 2-bit values and (Q3_K) its
// high bits (gguf_blocks.h).
struct K16Fields {
    size_t scales, scales_bytes, qs, hmask, hmask_bytes;
};
K16Fields k16_fields(GgmlType type) {
    return type == GgmlType::kQ2_K ? K16Fields{0, 16, 16, 0, 0} : K16Fields{96, 12, 32, 0, 32};
}

constexpr int kRandomBytes = -1;
constexpr int kFills[] = {0x00, 0xFF, 0x55, 0xAA, 0x0F, 0xF0, 0x80, kRandomBytes};

void fill_field(char* p, size_t bytes, int fill, std::mt19937& rng) {
    for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<char>(fill == kRandomBytes ? rng() : fill);
}

// Stored Q3_K scale j (0-63, the value plus 32) into the 12 packed bytes, as q3_k_scale reads it.
void set_q3_k_scale(char* scales, int j, int v) {
    auto& low = reinterpret_cast<uint8_t&>(scales[j % 8]);
    low = static_cast<uint8_t>(j < 8 ? (low & 0xF0) | (v & 0xF) : (low & 0x0F) | ((v & 0xF) << 4));
    auto& high = reinterpret_cast<uint8_t&>(scales[8 + j % 4]);
    const int at = 2 * (j / 4);
    high = static_cast<uint8_t>((high & ~(3 << at)) | (((v >> 4) & 3) << at));
}

// Edge blocks of Q2_K / Q3_K, one string each: every field one repeated byte (all scales and mins
// 0 or at their maximum, Q3_K's stored 6-bit scales 0 (-32) or 63 (+31), hmask all clear or all
// set, alternating bits), random mixes of such fields and random bytes, and each sub-block's
// scale alone at an extreme with the others at 0. The f16 scales cycle through ordinary,
// negative, the largest and a subnormal f16.
std::vector<std::string> k16_edge_blocks(GgmlType type, std::mt19937& rng) {
    const K16Fields f = k16_fields(type);
    const float d_values[] = {0.03f, -0.0172f, 65504.0f, 5.96e-8f};
    std::vector<std::string> blocks;
    auto add = [&](int scales, int qs, int hmask) -> std::string& {
        std::string b(ggml_traits(type).type_size, '\0');
        fill_field(&b[f.scales], f.scales_bytes, scales, rng);
        fill_field(&b[f.qs], 64, qs, rng);
        fill_field(&b[f.hmask], f.hmask_bytes, hmask, rng);
        size_t k = blocks.size();
        for (const size_t off : scale_offsets(type)) {
            const uint16_t h = f32_to_f16(d_values[k++ % 4]);
            std::memcpy(&b[off], &h, 2);
        }
        blocks.push_back(std::move(b));
        return blocks.back();
    };
    for (const int fill : kFills) add(fill, fill, fill);
    for (int i = 0; i < 120; ++i) add(kFills[rng() % 8], kFills[rng() % 8], kFills[rng() % 8]);
    for (int j = 0; j < 16; ++j) {
        if (type == GgmlType::kQ2_K) {  // scale nibble, min nibble, both at 15
            for (const int v : {0x0F, 0xF0, 0xFF}) add(0x00, kRandomBytes, 0)[f.scales + j] = static_cast<char>(v);
            continue;
        }
        for (const int v : {0, 63, 31, 33}) {
            std::string& b = add(0x00, kRandomBytes, kRandomBytes);
            for (int i = 0; i < 16; ++i) set_q3_k_scale(&b[f.scales], i, i == j ? v : 32);
        }
    }
    return blocks;
}

// Two q8_K activation blocks of one kind: quantized floats, all 127, all -128 (the quantizer
// stops at -127, but the kernels take any int8), alternating -128 / 127, random bytes.
std::vector<BlockQ8_K> q8_k_edge_row(int kind, std::mt19937& rng) {
    std::vector<BlockQ8_K> row(2);
    if (kind == 0) {
        std::vector<float> x(2 * kQK_K);
        std::uniform_real_distribution<float> u(-3.0f, 3.0f);
        for (float& v : x) v = u(rng);
        quantize_gguf(GgmlType::kQ8_K, x.data(), row.data(), 2 * kQK_K);
        return row;
    }
    for (BlockQ8_K& b : row) {
        b.d = 0.0213f;
        for (int i = 0; i < kQK_K; ++i) {
            const int alternating = i % 2 == 0 ? -128 : 127;
            const int random = static_cast<int>(rng() % 256) - 128;
            b.qs[i] = static_cast<int8_t>(kind == 1 ? 127 : kind == 2 ? -128 : kind == 3 ? alternating : random);
        }
        for (int j = 0; j < kQK_K / 16; ++j) {
            int sum = 0;
            for (int i = 16 * j; i < 16 * j + 16; ++i) sum += b.qs[i];
            b.bsums[j] = static_cast<int16_t>(sum);
        }
    }
    return row;
}

// Each edge block, first and second in a two-block row, against each kind of edge activations.
// Bound: below avx512 (the AVX2 kernels) the reference's bits, 0 ulp, since the integer sums are
// exact and the same f32 operations run in the same order (-ffp-contract=off); AVX-512 sums the
// super-blocks in lanes, so within 2e-6 * sum |w_i a_i| as in EveryIsaMatchesTheReferenceAndTheF64Dot.
TEST(GgufDotK16Test, EdgeBlocksMatchTheReference) {
    std::mt19937 rng(23);
    for (const GgmlType type : {GgmlType::kQ2_K, GgmlType::kQ3_K}) {
        const std::vector<std::string> blocks = k16_edge_blocks(type, rng);
        for (int kind = 0; kind < 5; ++kind) {
            const std::vector<BlockQ8_K> a = q8_k_edge_row(kind, rng);
            for (size_t i = 0; i < blocks.size(); ++i) {
                SCOPED_TRACE(testing::Message() << ggml_type_name(type) << " block " << i << " activations " << kind);
                const std::string w = " " + blocks[i] + blocks[(i + 1) % blocks.size()];  // odd address
                const float ref = gguf_vec_dot_ref(type, 2 * kQK_K, w.data() + 1, a.data());
                const Exact e = f64_dot(type, 2 * kQK_K, w.data() + 1, a.data());
                test::for_each_isa([&](cpu::Isa isa) {
                    const float got = gguf_vec_dot(type, 2 * kQK_K, w.data() + 1, a.data());
                    if (isa < cpu::Isa::kAvx512) {
                        EXPECT_EQ(f32_bits(got), f32_bits(ref)) << got << " vs " << ref;
                    } else {
                        EXPECT_NEAR(got, ref, 2e-6 * e.magnitude + 1e-30);
                    }
                });
            }
        }
    }
}

// Each E4M3 code (NaN aside) alone in a row against a unit activation: every level widens it to
// exactly d * e4m3(code), the subnormal codes included, for a power-of-two and an
// arbitrary block scale.
TEST(GgufDotF8Test, EveryCodeWidensExactly) {
    const int64_t bs = ggml_traits(GgmlType::kF8E4M3x128).block_size;
    std::string row(static_cast<size_t>(ggml_traits(GgmlType::kF8E4M3x128).type_size), '\0');
    std::vector<float> a(static_cast<size_t>(bs), 0.0f);
    for (const float d : {0.25f, 3.1e-3f}) {
        std::memcpy(row.data(), &d, 4);
        for (int code = 0; code < 256; ++code) {
            if ((code & 0x7f) == 0x7f) continue;
            const auto at = static_cast<size_t>(code % bs);
            std::fill(row.begin() + 4, row.end(), '\0');
            row[4 + at] = static_cast<char>(code);
            a.assign(a.size(), 0.0f);
            a[at] = 1.0f;
            const float expected = d * f8e4m3_to_f32(static_cast<uint8_t>(code));
            float dequantized[128];
            dequantize_gguf(GgmlType::kF8E4M3x128, row.data(), dequantized, bs);
            EXPECT_EQ(f32_bits(dequantized[at]), f32_bits(expected)) << "code " << code;
            test::for_each_isa([&](cpu::Isa isa) {
                const float got = gguf_vec_dot(GgmlType::kF8E4M3x128, bs, row.data(), a.data());
                EXPECT_EQ(got, expected)  // == as numbers: a sum from +0 cannot return -0
                    << "code " << code << " d " << d << " isa " << static_cast<int>(isa) << ": " << got;
            });
        }
    }
}

// Each MXFP4 nibble under each e8m0 exponent, alone in the second block of a three-block row (the
// AVX-512 step pairs it with the first), against quantized activations: every level gives the
// reference's bits (one nonzero block: the same two roundings, d_w * d_a then times the integer
// sum), and the reference the product of the dequantized weight and activation.
TEST(GgufDotMxfp4Test, EveryNibbleAndExponentMatchesTheReference) {
    constexpr int64_t n = 96;
    std::mt19937 rng(39);
    const std::vector<uint64_t> a = activations(GgmlType::kMXFP4, n, rng);
    std::vector<float> af(n);
    dequantize_gguf(GgmlType::kQ8_0, a.data(), af.data(), n);
    const size_t block_bytes = ggml_traits(GgmlType::kMXFP4).type_size;  // e, then 16 bytes of nibbles
    std::string row(3 * block_bytes, '\0');
    for (int e = 0; e < 256; ++e) {
        for (int q = 0; q < 16; ++q) {
            const int at = (e + 5 * q) % 32;
            std::fill(row.begin(), row.end(), '\0');
            row[block_bytes] = static_cast<char>(e);
            row[block_bytes + 1 + at % 16] = static_cast<char>(at < 16 ? q : q << 4);
            const float ref = gguf_vec_dot_ref(GgmlType::kMXFP4, n, row.data(), a.data());
            float w[n];
            dequantize_gguf(GgmlType::kMXFP4, row.data(), w, n);
            const double exact = static_cast<double>(w[32 + at]) * af[static_cast<size_t>(32 + at)];
            if (std::isfinite(exact) && std::fabs(exact) < 1e30) {
                EXPECT_NEAR(ref, exact, 1e-6 * std::fabs(exact) + 1e-45) << "e " << e << " q " << q;
            }
            test::for_each_isa([&](cpu::Isa isa) {
                const float got = gguf_vec_dot(GgmlType::kMXFP4, n, row.data(), a.data());
                EXPECT_EQ(f32_bits(got), f32_bits(ref))
                    << "e " << e << " q " << q << " isa " << static_cast<int>(isa) << ": " << got << " vs " << ref;
            });
        }
    }
}

TEST(GgufDotPairingTest, ActivationTypesFollowLlamaCpp) {
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kQ4_0), GgmlType::kQ8_0);
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kQ8_0), GgmlType::kQ8_0);
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kMXFP4), GgmlType::kQ8_0);  // as llama.cpp's vec_dot_type
    // Q4_1 / Q5_1: q8_0 here, q8_1 (the same bytes plus their f16 sum) in llama.cpp
    for (const GgmlType t : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
        EXPECT_EQ(gguf_dot_activation_type(t), GgmlType::kQ8_0);
    }
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kQ4_K), GgmlType::kQ8_K);
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kQ5_K), GgmlType::kQ8_K);
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kQ6_K), GgmlType::kQ8_K);
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kQ2_K), GgmlType::kQ8_K);
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kQ3_K), GgmlType::kQ8_K);
    EXPECT_EQ(gguf_dot_activation_type(GgmlType::kF8E4M3x128), GgmlType::kF32);  // moeserve's W8A16
    EXPECT_FALSE(gguf_dot_supported(GgmlType::kIQ2_XXS));
    EXPECT_FALSE(gguf_dot_supported(GgmlType::kF32));
}

}  // namespace
}  // namespace moeserve::kernels::cpu
