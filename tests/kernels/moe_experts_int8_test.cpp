// moe_experts_int8 vs the token-by-token int8 reference: decode and GEMM paths, EP slices with
// tokens routed only elsewhere, odd sizes (k not a multiple of 32), 1-3 threads.
#include "moeserve/kernels/cpu/moe_experts_int8.h"

#include <gtest/gtest.h>

#include <numeric>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

struct Case {
    int64_t tokens, hidden, inter, num_experts, expert_begin, global_experts;
    int k;
};

void check(const Case& c, int threads, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "tokens=" << c.tokens << " h=" << c.hidden << " i=" << c.inter
                                    << " e=" << c.num_experts << " k=" << c.k << " threads=" << threads);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> d8(-127, 127);
    auto ints = [&](int64_t n) {
        std::vector<int8_t> v(size_t(n) + 1);
        for (auto& e : v) e = static_cast<int8_t>(d8(rng));
        return v;
    };
    std::vector<int8_t> gu = ints(c.num_experts * 2 * c.inter * c.hidden);
    std::vector<int8_t> down = ints(c.num_experts * c.hidden * c.inter);
    test::Floats gus(c.num_experts * 2 * c.inter), ds(c.num_experts * c.hidden);
    test::fill_uniform(gus.data(), c.num_experts * 2 * c.inter, rng, 0.5f / 127 / std::sqrt(float(c.hidden)),
                       1.0f / 127 / std::sqrt(float(c.hidden)));
    test::fill_uniform(ds.data(), c.num_experts * c.hidden, rng, 0.5f / 127 / std::sqrt(float(c.inter)),
                       1.0f / 127 / std::sqrt(float(c.inter)));
    MoeExpertsInt8 ex{gu.data() + 1, gus.data(),     down.data() + 1, ds.data(),
                      c.num_experts, c.expert_begin, c.hidden,        c.inter};
    test::Floats x(c.tokens * c.hidden), out(c.tokens * c.hidden), ref(c.tokens * c.hidden);
    test::fill_uniform(x.data(), c.tokens * c.hidden, rng, -2.0f, 2.0f);
    std::vector<int32_t> ids(size_t(c.tokens * c.k));
    std::vector<float> w(ids.size());
    std::vector<int32_t> perm(size_t(c.global_experts));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t t = 0; t < c.tokens; ++t) {
        std::shuffle(perm.begin(), perm.end(), rng);
        if (t == c.tokens - 1 && c.global_experts - c.num_experts >= c.k) {
            std::stable_partition(perm.begin(), perm.end(),
                                  [&](int32_t e) { return e < c.expert_begin || e >= c.expert_begin + c.num_experts; });
        }
        for (int j = 0; j < c.k; ++j) {
            ids[size_t(t * c.k + j)] = perm[size_t(j)];
            w[size_t(t * c.k + j)] = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        }
    }
    ThreadPool pool(threads);
    MoeScratch scratch;
    MoeInt8Scratch qscratch;
    for (int rep = 0; rep < 2; ++rep) {
        moe_experts_int8(pool, x.data(), c.tokens, ids.data(), w.data(), c.k, ex, scratch, qscratch, out.data());
    }
    moe_experts_int8_ref(x.data(), c.tokens, ids.data(), w.data(), c.k, ex, ref.data());
    // The vectorized exp in SwiGLU may move an activation across a rounding boundary: one
    // quantization step (1/127 of the row's absmax) in a few elements.
    test::expect_close(out.data(), ref.data(), c.tokens * c.hidden, 2e-3f, "moe int8");
    if (c.global_experts - c.num_experts >= c.k) {
        for (int64_t i = 0; i < c.hidden; ++i) ASSERT_EQ(out[(c.tokens - 1) * c.hidden + i], 0.0f);
    }
}

TEST(MoeExpertsInt8Test, MatchesReference) {
    test::for_each_isa([&](cpu::Isa) {
        uint32_t seed = 10;
        for (int threads : {1, 2, 3}) {
            check({1, 100, 33, 16, 0, 16, 8}, threads, seed++);
            check({3, 64, 40, 8, 4, 16, 1}, threads, seed++);
            check({40, 72, 50, 4, 8, 12, 8}, threads, seed++);
            check({17, 33, 7, 32, 0, 64, 2}, threads, seed++);
            check({255, 40, 17, 4, 0, 4, 2}, threads, seed++);
        }
    });
}

TEST(MoeExpertsInt8Test, BenchModelDecodeShape) {
    test::for_each_isa([&](cpu::Isa) { check({1, 1024, 384, 64, 0, 64, 8}, 2, 77); });
}

}  // namespace
}  // namespace moeserve::kernels::cpu
