// The fp8 (e4m3) KV cache in the kernels: the AVX2 widening of e4m3 (through f16, simd_avx2.h)
// is exact for every non-NaN code, directly and through the readers of the cache (read_latent,
// and paged_attention's value rows); write_kv / write_latent quantize each row with its own scale
// and read back within e4m3's rounding bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "moeserve/core/dtype.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/cpu/mla_attention.h"
#include "moeserve/kernels/cpu/paged_attention.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

// The 254 codes that are not NaN (0x7f, 0xff), in order.
std::vector<uint8_t> finite_codes() {
    std::vector<uint8_t> codes;
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) != 0x7f) codes.push_back(static_cast<uint8_t>(c));
    }
    return codes;
}

// Bit equality (tells -0 from +0).
void expect_same_float(float got, float want, int code) {
    uint32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    EXPECT_EQ(a, b) << "code 0x" << std::hex << code << ": got " << got << " want " << want;
}

TEST(KvFp8Test, AvxWideningIsExactForEveryCode) {
    const std::vector<uint8_t> codes = finite_codes();
    ASSERT_EQ(codes.size(), 254u);
    alignas(32) float got[8];
    for (size_t i = 0; i < codes.size(); i += 8) {  // the last 8 wrap around
        simd::E4m3 in[8];
        for (size_t u = 0; u < 8; ++u) in[u].bits = codes[(i + u) % codes.size()];
        _mm256_store_ps(got, simd::load8(in));
        for (size_t u = 0; u < 8; ++u) {
            const uint8_t c = in[u].bits;
            const float want = f8e4m3_to_f32(c) / simd::kE4m3Unit;
            expect_same_float(got[u], want, c);
            expect_same_float(simd::to_f32(in[u]), want, c);
            expect_same_float(got[u] * simd::kE4m3Unit, f8e4m3_to_f32(c), c);
        }
    }
}

// read_latent of rows holding every code, in order and reversed (so each code passes through the
// 8-wide loop and the scalar tail of both the latent and the k_pe part), with power-of-two
// scales: code * scale exactly.
TEST(KvFp8Test, ReadLatentWidensEveryCodeExactly) {
    const std::vector<uint8_t> codes = finite_codes();
    const int64_t rank = 203, rope = 51, row = rank + rope;  // 254, neither part a multiple of 8
    ASSERT_EQ(row, int64_t(codes.size()));
    const int64_t num_blocks = 3, block_size = 1;
    std::vector<uint8_t> cache(size_t(num_blocks * row), 0);
    for (int64_t x = 0; x < row; ++x) {
        cache[size_t(row + x)] = codes[size_t(x)];
        cache[size_t(2 * row + x)] = codes[size_t(row - 1 - x)];
    }
    std::vector<float> scales = {1.0f, 1.0f, 1.0f, 0.125f, 4.0f, 1.0f};
    const PagedLatentLayer kv{cache.data(), num_blocks, block_size, rank, rope, DType::kF8E4M3, scales.data()};
    const int32_t table[2] = {1, 2};
    std::vector<float> out(size_t(2 * row));
    read_latent(kv, table, 0, 2, out.data());
    for (int64_t j = 0; j < 2; ++j) {
        for (int64_t x = 0; x < row; ++x) {
            const uint8_t c = cache[size_t((j + 1) * row + x)];
            const float scale = scales[size_t(2 * (j + 1) + (x < rank ? 0 : 1))];
            expect_same_float(out[size_t(j * row + x)], f8e4m3_to_f32(c) * scale, c);
        }
    }
}

// A sequence of one token attends only to itself: softmax weight 1, so the output is its value
// row. With head_dim 254 the row holds every code (in order for one kv head, reversed for the
// other): paged_attention's fp8 value path widens each exactly.
TEST(KvFp8Test, PagedAttentionOfOneKeyReturnsItsValueRowExactly) {
    const std::vector<uint8_t> codes = finite_codes();
    const int64_t d = 254, kv_heads = 2, heads = 4;
    std::vector<uint8_t> k(size_t(2 * kv_heads * d), 0x38), v(k.size(), 0);  // block 0 unused
    for (int64_t x = 0; x < d; ++x) {
        v[size_t(kv_heads * d + x)] = codes[size_t(x)];
        v[size_t(kv_heads * d + d + x)] = codes[size_t(d - 1 - x)];
    }
    std::vector<float> k_scale(2 * kv_heads, 1.0f), v_scale(2 * kv_heads, 1.0f);
    v_scale[3] = 0.5f;
    const PagedKvLayer kv{k.data(), v.data(), 2, 1, kv_heads, d, DType::kF8E4M3, k_scale.data(), v_scale.data()};
    std::vector<float> q(size_t(heads * d), 0.01f), out(q.size());
    const int32_t start[2] = {0, 1}, lens[1] = {1}, table[1] = {1};
    ThreadPool pool(1);
    paged_attention(pool, kv, {q.data(), out.data(), 1, heads, 1, start, lens, table, 1, 0.1f});
    for (int64_t h = 0; h < heads; ++h) {
        const int64_t kvh = h / (heads / kv_heads);
        for (int64_t x = 0; x < d; ++x) {
            const uint8_t c = v[size_t((kv_heads + kvh) * d + x)];
            // == rather than bits: the sum starts at +0, so code 0x80 (-0) comes out +0
            EXPECT_EQ(out[size_t(h * d + x)], f8e4m3_to_f32(c) * v_scale[size_t(kv_heads + kvh)]) << int(c);
        }
    }
}

// |read back - written| <= 2^-4 |value| where value / scale is a normal e4m3 number, and
// <= 2^-10 scale below that (scale = the row's max |value| / 448); hence <= 2^-4 of the row's
// max |value| everywhere.
void expect_within_e4m3_bound(float got, float want, float scale, const char* what) {
    const float bound = std::max(std::ldexp(std::fabs(want), -4), std::ldexp(scale, -10)) * 1.0001f;
    ASSERT_LE(std::fabs(got - want), bound) << what << ": wrote " << want << " read " << got << " scale " << scale;
}

// Rows with magnitudes from 1e-3 to 1e3 (a different one per head) and a few tiny values.
std::vector<float> random_rows(int64_t rows, int64_t d, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> out(size_t(rows * d));
    for (int64_t r = 0; r < rows; ++r) {
        const float mag = std::pow(10.0f, float(r % 7) - 3.0f);
        for (int64_t x = 0; x < d; ++x) out[size_t(r * d + x)] = mag * normal(rng) * (x % 11 == 3 ? 1e-5f : 1.0f);
    }
    return out;
}

TEST(KvFp8Test, WriteKvRoundTripsEachRowWithinTheE4m3Bound) {
    std::mt19937 rng(11);
    const int64_t kv_heads = 3, d = 37, num_blocks = 4, bs = 3, tokens = 7;
    const int64_t row = kv_heads * d;
    const std::vector<float> k = random_rows(tokens * kv_heads, d, rng), v = random_rows(tokens * kv_heads, d, rng);
    std::vector<uint8_t> kc(size_t(num_blocks * bs * row), 0), vc(kc.size(), 0);
    std::vector<float> ks(size_t(num_blocks * bs * kv_heads), -1.0f), vs(ks.size(), -1.0f);
    const PagedKvLayer kv{kc.data(), vc.data(), num_blocks, bs, kv_heads, d, DType::kF8E4M3, ks.data(), vs.data()};
    const std::vector<int64_t> slots = {4, 5, -1, 11, 3, 9, 10};
    write_kv(kv, k.data(), v.data(), tokens, slots.data());
    for (int64_t t = 0; t < tokens; ++t) {
        const int64_t slot = slots[size_t(t)];
        if (slot < 0) continue;
        for (int64_t h = 0; h < kv_heads; ++h) {
            const int64_t sr = slot * kv_heads + h;
            float kmax = 0, vmax = 0;
            for (int64_t x = 0; x < d; ++x) {
                kmax = std::max(kmax, std::fabs(k[size_t(t * row + h * d + x)]));
                vmax = std::max(vmax, std::fabs(v[size_t(t * row + h * d + x)]));
            }
            EXPECT_FLOAT_EQ(ks[size_t(sr)], kmax / 448.0f);
            EXPECT_FLOAT_EQ(vs[size_t(sr)], vmax / 448.0f);
            for (int64_t x = 0; x < d; ++x) {
                const auto c = size_t(sr * d + x), i = size_t(t * row + h * d + x);
                expect_within_e4m3_bound(f8e4m3_to_f32(kc[c]) * ks[size_t(sr)], k[i], ks[size_t(sr)], "k");
                expect_within_e4m3_bound(f8e4m3_to_f32(vc[c]) * vs[size_t(sr)], v[i], vs[size_t(sr)], "v");
            }
        }
    }
    // Slots nobody wrote (the padding token's included) are untouched.
    for (int64_t slot : {0, 1, 2, 6, 7, 8}) {
        for (int64_t h = 0; h < kv_heads; ++h) EXPECT_EQ(ks[size_t(slot * kv_heads + h)], -1.0f) << slot;
    }
    // An all-zero row gets scale 1 and zero codes.
    const std::vector<float> zeros(size_t(row), 0.0f);
    const int64_t slot0 = 0;
    write_kv(kv, zeros.data(), zeros.data(), 1, &slot0);
    for (int64_t h = 0; h < kv_heads; ++h) EXPECT_EQ(ks[size_t(h)], 1.0f);
    for (int64_t i = 0; i < row; ++i) EXPECT_EQ(kc[size_t(i)], 0);
}

TEST(KvFp8Test, WriteLatentRoundTripsLatentAndRopeWithinTheE4m3Bound) {
    std::mt19937 rng(12);
    const int64_t rank = 29, rope = 10, row = rank + rope, n = 6;
    std::vector<float> rows = random_rows(n, row, rng);
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t x = rank; x < row; ++x) rows[size_t(i * row + x)] *= 50.0f;  // k_pe's own range
    }
    std::vector<uint8_t> cache(size_t(n * row), 0);
    std::vector<float> scales(size_t(2 * n), 0.0f);
    const PagedLatentLayer kv{cache.data(), n, 1, rank, rope, DType::kF8E4M3, scales.data()};
    std::vector<int64_t> slots(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) slots[size_t(i)] = n - 1 - i;
    write_latent(kv, rows.data(), n, slots.data());
    const int32_t table[6] = {5, 4, 3, 2, 1, 0};  // position i is slot n - 1 - i
    std::vector<float> back(size_t(n * row));
    read_latent(kv, table, 0, n, back.data());
    for (int64_t i = 0; i < n; ++i) {
        const int64_t slot = n - 1 - i;
        float lmax = 0, rmax = 0;
        for (int64_t x = 0; x < rank; ++x) lmax = std::max(lmax, std::fabs(rows[size_t(i * row + x)]));
        for (int64_t x = rank; x < row; ++x) rmax = std::max(rmax, std::fabs(rows[size_t(i * row + x)]));
        EXPECT_FLOAT_EQ(scales[size_t(2 * slot)], lmax / 448.0f);
        EXPECT_FLOAT_EQ(scales[size_t(2 * slot + 1)], rmax / 448.0f);
        for (int64_t x = 0; x < row; ++x) {
            const float scale = scales[size_t(2 * slot + (x < rank ? 0 : 1))];
            expect_within_e4m3_bound(back[size_t(i * row + x)], rows[size_t(i * row + x)], scale, "latent row");
        }
    }
}

}  // namespace
}  // namespace moeserve::kernels::cpu
