// linear_int4 (W4A16) against the dequantize-then-f64 product: odd m, n and k, partial last
// groups, group sizes 32/64/128 and one group per row, asymmetric zeros, 1-3 threads, every ISA
// level this CPU runs. Bound: both paths multiply the same f32 weights (one rounding of
// scale * (code - zero), checked bit-exact first), so the only error is f32 summation:
// |out - exact| <= (k + 1) * 2^-24 * sum_p |x_p * w_p| (the standard recursive-sum bound).
// moe_experts_int4 against its token-by-token reference within 1e-5 of max |reference|.
// W4A8 (the same weights, per-token int8 activations: linear_w4a8.h) against the float64 product
// of the dequantized weights and the quantized activations: odd m, n and k (the vector tiles take
// k % 32 == 0 and run the scalar tile otherwise), partial last chunks and groups, group sizes
// 32 / 64 / 128 / 256 and one group per row, zeros 0..16. The integer products are exact, so the
// only error is the f32 sum of at most k / 8 lane products plus the groups' zero terms:
// |out - exact| <= (k / 8 + groups + 2) * 2^-24 * magnitude, magnitude = sx * sum_g scale_g *
// (sum_p code_p * |q_p| + zero_g * |qsum_g|). The `ref` level equals linear_int4_ref bit for bit
// (same quantizer, same tile). W4A8 MoE experts against the reference within 2e-3 of
// max |reference| (moe_experts_int8_test's bound: the vectorized SwiGLU may move an activation of
// the down projection across an int8 rounding boundary).
#include "moeserve/kernels/cpu/linear_int4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kernel_test_util.h"
#include "moeserve/kernels/cpu/linear_w4a8.h"
#include "moeserve/kernels/cpu/moe_experts_int4.h"
#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::kernels::cpu {
namespace {

// Random codes, scales and zeros of an [n, k] int4 matrix, kept alive with their Int4Weights.
struct RandomInt4 {
    std::vector<uint8_t> codes;  // unpacked, one per element (the test's independent copy)
    std::vector<uint8_t> packed;
    std::vector<float> scale, zero;
    Int4Weights w;

    RandomInt4(int64_t n, int64_t k, int64_t group_size, std::mt19937& rng, bool int8_activations = false) {
        const int64_t ng = int4_groups(k, group_size);
        codes.resize(size_t(n * k));
        packed.assign(size_t(n * k / 2 + 1), 0);
        scale.resize(size_t(n * ng));
        zero.resize(size_t(n * ng));
        std::uniform_int_distribution<int> c16(0, 15), z(0, 16);
        for (auto& c : codes) c = static_cast<uint8_t>(c16(rng));
        for (int64_t i = 0; i < n * k; ++i) packed[size_t(1 + i / 2)] |= uint8_t(codes[size_t(i)] << (4 * (i & 1)));
        test::fill_uniform(scale.data(), n * ng, rng, 0.001f, 0.05f);
        for (auto& v : zero) v = static_cast<float>(z(rng));
        // offset by one byte: kernels must not assume aligned codes; the matrix ends at the buffer's end
        w = Int4Weights{packed.data() + 1, scale.data(), zero.data(), n, k, group_size, int8_activations};
    }
    double weight(int64_t j, int64_t p) const {
        const int64_t g = j * w.groups() + p / w.group_size;
        return static_cast<float>((double(codes[size_t(j * w.k + p)]) - zero[size_t(g)]) * double(scale[size_t(g)]));
    }
};

void check_shape(int64_t m, int64_t k, int64_t n, int64_t group_size, int threads, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " k=" << k << " n=" << n << " group=" << group_size
                                    << " threads=" << threads);
    std::mt19937 rng(seed);
    const RandomInt4 r(n, k, group_size, rng);
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = 0; j < n; ++j) {
        dequantize_int4_row(r.w, j, row.data());
        for (int64_t p = 0; p < k; ++p) ASSERT_EQ(row[size_t(p)], r.weight(j, p)) << "j=" << j << " p=" << p;
    }
    ThreadPool pool(threads);
    test::Floats x(m * k), out(m * n), ref(m * n);
    test::fill_uniform(x.data(), m * k, rng, -3.0f, 3.0f);
    linear_int4(pool, x.data(), m, r.w, out.data());
    linear_int4_ref(x.data(), m, r.w, ref.data());
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double exact = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; ++p) {
                exact += double(x[i * k + p]) * r.weight(j, p);
                mag += std::fabs(double(x[i * k + p]) * r.weight(j, p));
            }
            const double bound = double(k + 1) * std::ldexp(1.0, -24) * mag;
            ASSERT_LE(std::fabs(out[i * n + j] - exact), bound) << "i=" << i << " j=" << j;
            ASSERT_LE(std::fabs(ref[i * n + j] - exact), bound) << "reference i=" << i << " j=" << j;
        }
    }
}

TEST(LinearInt4Test, LargeShapesMatchDequantizedProduct) {
    test::for_each_isa([&](cpu::Isa) {
        check_shape(1, 1024, 517, 128, 2, 5);
        check_shape(4, 2048, 64, 64, 2, 6);
        check_shape(70, 384, 100, 32, 3, 7);
    });
}

void check_w4a8_shape(int64_t m, int64_t k, int64_t n, int64_t group_size, int threads, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " k=" << k << " n=" << n << " group=" << group_size
                                    << " threads=" << threads);
    std::mt19937 rng(seed);
    const RandomInt4 r(n, k, group_size, rng, true);
    const int64_t ng = r.w.groups();
    ThreadPool pool(threads);
    test::Floats x(m * k), out(m * n), ref(m * n);
    test::fill_uniform(x.data(), m * k, rng, -3.0f, 3.0f);
    x[0] = 40.0f;  // one outlier: the row's scale follows it
    linear_int4(pool, x.data(), m, r.w, out.data());
    linear_int4_ref(x.data(), m, r.w, ref.data());
    if (cpu::active_isa() == cpu::Isa::kRef) {
        for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(out[i], ref[i]) << i;
    }
    std::vector<int8_t> q(static_cast<size_t>(k));
    for (int64_t i = 0; i < m; ++i) {
        float sx = 0.0f;
        quantize_rows_int8_ref(x.data() + i * k, k, 1, k, q.data(), k, &sx);
        for (int64_t j = 0; j < n; ++j) {
            double exact = 0.0, mag = 0.0;
            for (int64_t g = 0; g < ng; ++g) {
                const double s = r.scale[size_t(j * ng + g)], z = r.zero[size_t(j * ng + g)];
                double dot = 0.0, abs_dot = 0.0, qsum = 0.0;
                for (int64_t p = g * group_size; p < std::min(k, (g + 1) * group_size); ++p) {
                    dot += double(r.codes[size_t(j * k + p)]) * q[size_t(p)];
                    abs_dot += double(r.codes[size_t(j * k + p)]) * std::fabs(double(q[size_t(p)]));
                    qsum += q[size_t(p)];
                }
                exact += s * (dot - z * qsum);
                mag += s * (abs_dot + z * std::fabs(qsum));
            }
            exact *= sx;
            mag *= sx;
            const double bound = double(k / 8 + ng + 2) * std::ldexp(1.0, -24) * mag;
            ASSERT_LE(std::fabs(out[i * n + j] - exact), bound) << "i=" << i << " j=" << j;
            ASSERT_LE(std::fabs(ref[i * n + j] - exact), bound) << "reference i=" << i << " j=" << j;
        }
    }
}

// W4A16 and W4A8 on the same odd shapes (W4A8's vector tiles take k % 32 == 0 and groups of 32,
// 64 or multiples of 128: the rest run its scalar tile).
TEST(LinearInt4Test, OddShapesMatchExactProducts) {
    test::for_each_isa([&](cpu::Isa) {
        uint32_t seed = 1;
        for (int threads : {1, 2, 3}) {
            for (int64_t m : {1, 2, 3, 4, 5, 9, 17}) {
                for (int64_t k : {2, 30, 32, 64, 96, 100, 130, 160, 288}) {
                    for (int64_t gs : {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{256}, k}) {
                        for (int64_t n : {1, 7, 33}) {
                            check_shape(m, k, n, gs, threads, seed);
                            check_w4a8_shape(m, k, n, gs, threads, seed++);
                        }
                    }
                }
            }
        }
    });
}

TEST(LinearInt4Test, W4A8LargeShapesMatchExactProduct) {
    test::for_each_isa([&](cpu::Isa) {
        check_w4a8_shape(1, 2048, 517, 128, 2, 5);
        check_w4a8_shape(4, 2048, 64, 256, 2, 6);
        check_w4a8_shape(70, 384, 100, 32, 3, 7);
        check_w4a8_shape(1, 768, 300, 768, 2, 8);  // per channel
    });
}

struct MoeCase {
    int64_t tokens, hidden, inter, num_experts, expert_begin, global_experts, group_size;
    int k;
    bool act_order = false;  // GPTQ desc_act: per-expert column orders of x and of the SwiGLU output
    bool w4a8 = false;       // int8 activations
};

std::vector<int32_t> random_orders(int64_t count, int64_t width, std::mt19937& rng) {
    std::vector<int32_t> v(static_cast<size_t>(count * width));
    for (int64_t e = 0; e < count; ++e) {
        std::iota(v.begin() + e * width, v.begin() + (e + 1) * width, 0);
        std::shuffle(v.begin() + e * width, v.begin() + (e + 1) * width, rng);
    }
    return v;
}

void check_moe(const MoeCase& c, int threads, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "tokens=" << c.tokens << " h=" << c.hidden << " i=" << c.inter
                                    << " e=" << c.num_experts << " k=" << c.k << " threads=" << threads);
    std::mt19937 rng(seed);
    const RandomInt4 gu(c.num_experts * 2 * c.inter, c.hidden, c.group_size, rng, c.w4a8);
    const RandomInt4 down(c.num_experts * c.hidden, c.inter, c.group_size, rng, c.w4a8);
    const std::vector<int32_t> gu_order = random_orders(c.num_experts, c.hidden, rng);
    const std::vector<int32_t> down_order = random_orders(c.num_experts, c.inter, rng);
    const MoeExpertsInt4 ex{gu.w,
                            down.w,
                            c.num_experts,
                            c.expert_begin,
                            c.hidden,
                            c.inter,
                            c.act_order ? gu_order.data() : nullptr,
                            c.act_order ? down_order.data() : nullptr};
    test::Floats x(c.tokens * c.hidden), out(c.tokens * c.hidden), ref(c.tokens * c.hidden);
    test::fill_uniform(x.data(), c.tokens * c.hidden, rng, -2.0f, 2.0f);
    std::vector<int32_t> ids(size_t(c.tokens * c.k));
    std::vector<float> w(ids.size());
    std::vector<int32_t> perm(size_t(c.global_experts));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t t = 0; t < c.tokens; ++t) {
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int j = 0; j < c.k; ++j) {
            ids[size_t(t * c.k + j)] = perm[size_t(j)];
            w[size_t(t * c.k + j)] = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        }
    }
    ThreadPool pool(threads);
    MoeScratch scratch;
    for (int rep = 0; rep < 2; ++rep) {
        moe_experts_int4(pool, x.data(), c.tokens, ids.data(), w.data(), c.k, ex, scratch, out.data());
    }
    moe_experts_int4_ref(x.data(), c.tokens, ids.data(), w.data(), c.k, ex, ref.data());
    test::expect_close(out.data(), ref.data(), c.tokens * c.hidden, c.w4a8 ? 2e-3f : 1e-5f, "moe int4");
}

TEST(MoeExpertsInt4Test, MatchesReference) {
    test::for_each_isa([&](cpu::Isa) {
        uint32_t seed = 10;
        for (int threads : {1, 2, 3}) {
            check_moe({1, 128, 64, 16, 0, 16, 32, 8}, threads, seed++);
            check_moe({3, 64, 40, 8, 4, 16, 32, 1}, threads, seed++);  // EP slice: half the experts elsewhere
            check_moe({40, 96, 50, 4, 8, 12, 64, 8}, threads, seed++);
            check_moe({17, 34, 6, 32, 0, 64, 34, 2}, threads, seed++);      // one group per row
            check_moe({9, 64, 32, 8, 0, 8, 32, 2, true}, threads, seed++);  // act order
        }
    });
}

TEST(MoeExpertsInt4Test, W4A8MatchesReference) {
    test::for_each_isa([&](cpu::Isa) {
        uint32_t seed = 10;
        for (int threads : {1, 2, 3}) {
            check_moe({1, 128, 64, 16, 0, 16, 32, 8, false, true}, threads, seed++);
            check_moe({3, 64, 40, 8, 4, 16, 32, 1, false, true}, threads, seed++);  // EP slice
            check_moe({40, 256, 128, 4, 8, 12, 128, 8, false, true}, threads, seed++);
            check_moe({17, 34, 6, 32, 0, 64, 34, 2, false, true}, threads, seed++);  // one group per row, scalar tile
        }
    });
}

}  // namespace
}  // namespace moeserve::kernels::cpu
