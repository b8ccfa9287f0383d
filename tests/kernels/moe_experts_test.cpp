// moe_experts_bf16 and moe_experts_f32 vs the token-by-token reference: random routing with idle experts, tokens
// routed only to experts outside this rank's range, k = 1 and 8, GEMV and GEMM paths, 1-3 threads.
#include "moeserve/kernels/cpu/moe_experts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <numeric>

#include "kernel_test_util.h"
#include "moeserve/kernels/cpu/bf16_panels.h"
#include "moeserve/kernels/cpu/moe_grouping.h"
#include "moeserve/core/dtype.h"

namespace moeserve::kernels::cpu {
namespace {

struct Case {
    int64_t tokens, hidden, inter, num_experts, expert_begin, global_experts;
    int k;
};

// The experts' bf16 weights repacked into panels as Experts::pack_for_kernels lays them out
// (MoeExpertsBf16::panels): per expert its gate, its up, and apart its down. 64-byte aligned.
struct RepackedExperts {
    std::unique_ptr<uint16_t, decltype(&std::free)> gate_up{nullptr, &std::free}, down{nullptr, &std::free};
};

RepackedExperts repack(const std::vector<uint16_t>& gu, const std::vector<uint16_t>& down, const Case& c) {
    const int64_t h = c.hidden, inter = c.inter;
    const int64_t gate_elems = int64_t(bf16_panel_bytes(inter, h) / 2),
                  down_elems = int64_t(bf16_panel_bytes(h, inter) / 2);
    RepackedExperts r;
    ThreadPool pool(2);
    r.gate_up.reset(static_cast<uint16_t*>(std::aligned_alloc(64, size_t(c.num_experts * 2 * gate_elems * 2))));
    r.down.reset(static_cast<uint16_t*>(std::aligned_alloc(64, size_t(c.num_experts * down_elems * 2))));
    for (int64_t half = 0; half < 2 * c.num_experts; ++half) {
        pack_bf16_panels(pool, gu.data() + half * inter * h, h, inter, h, r.gate_up.get() + half * gate_elems);
    }
    for (int64_t e = 0; e < c.num_experts; ++e) {
        pack_bf16_panels(pool, down.data() + e * h * inter, inter, h, inter, r.down.get() + e * down_elems);
    }
    return r;
}

// gpt_oss: the gpt-oss unit (biases, clamps at 0.5 so that they bite, alpha 1.702). panels: the
// kernel runs the weights repacked (the reference the stored rows).
void check(const Case& c, int threads, uint32_t seed, bool f32 = false, bool gpt_oss = false, bool panels = false) {
    SCOPED_TRACE(testing::Message() << "tokens=" << c.tokens << " h=" << c.hidden << " i=" << c.inter
                                    << " e=" << c.num_experts << " k=" << c.k << " threads=" << threads
                                    << " f32=" << f32 << " gpt-oss=" << gpt_oss << " panels=" << panels);
    std::mt19937 rng(seed);
    const float wscale = 1.0f / std::sqrt(float(c.hidden));
    std::vector<uint16_t> gu = test::random_bf16(c.num_experts * 2 * c.inter * c.hidden, rng, wscale);
    std::vector<uint16_t> down = test::random_bf16(c.num_experts * c.hidden * c.inter, rng, wscale);
    MoeExpertsBf16 ex{gu.data(), down.data(), c.num_experts, c.expert_begin, c.hidden, c.inter};
    // f32: the same weights widened, as --dtype float32 loads them
    std::vector<float> gu32(gu.size()), down32(down.size());
    for (size_t i = 0; i < gu.size(); ++i) gu32[i] = bf16_to_f32(gu[i]);
    for (size_t i = 0; i < down.size(); ++i) down32[i] = bf16_to_f32(down[i]);
    MoeExpertsF32 ex32{gu32.data(), down32.data(), c.num_experts, c.expert_begin, c.hidden, c.inter};
    std::vector<float> bias(size_t(c.num_experts * 2 * c.inter));
    test::fill_uniform(bias.data(), int64_t(bias.size()), rng, -0.5f, 0.5f);
    if (gpt_oss) ex.glu = ex32.glu = ExpertGlu{bias.data(), 0.5f, 1.702f};
    test::Floats x(c.tokens * c.hidden), out(c.tokens * c.hidden), ref(c.tokens * c.hidden);
    test::fill_uniform(x.data(), c.tokens * c.hidden, rng, -2.0f, 2.0f);
    // Distinct experts per token, drawn from the global range; the last token only picks experts
    // outside the local range when there are enough of those.
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
    const RepackedExperts packed = panels ? repack(gu, down, c) : RepackedExperts{};
    MoeExpertsBf16 ex_run = ex;
    if (panels) {
        ex_run.gate_up = packed.gate_up.get();
        ex_run.down = packed.down.get();
        ex_run.panels = true;
    }
    for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the grown scratch
        if (f32) {
            moe_experts_f32(pool, x.data(), c.tokens, ids.data(), w.data(), c.k, ex32, scratch, out.data());
        } else {
            moe_experts_bf16(pool, x.data(), c.tokens, ids.data(), w.data(), c.k, ex_run, scratch, out.data());
        }
    }
    if (f32) {
        moe_experts_f32_ref(x.data(), c.tokens, ids.data(), w.data(), c.k, ex32, ref.data());
    } else {
        moe_experts_bf16_ref(x.data(), c.tokens, ids.data(), w.data(), c.k, ex, ref.data());
    }
    // With MOESERVE_BF16_ACTIVATIONS=round the avx512 GEMM (experts with > 8 tokens) rounds
    // activations to bf16 once: 2^-9 relative per element, a few 1e-3 on these sums (linear_test
    // checks that GEMM exactly).
    std::vector<int> per_expert(size_t(c.global_experts), 0);
    for (int32_t e : ids) per_expert[size_t(e)]++;
    const bool gemm = *std::max_element(per_expert.begin(), per_expert.end()) > 8;
    // (f32 weights stay on the f32 AVX2 path, never rounded)
    const bool rounded = !f32 && !panels && active_isa() >= Isa::kAvx512 && bf16_round_activations() && gemm;
    const float tol = rounded ? 1e-2f : 1e-5f;
    test::expect_close(out.data(), ref.data(), c.tokens * c.hidden, tol, "moe");
    if (c.global_experts - c.num_experts >= c.k) {
        for (int64_t i = 0; i < c.hidden; ++i) ASSERT_EQ(out[(c.tokens - 1) * c.hidden + i], 0.0f);
    }
}

TEST(MoeExpertsTest, MatchesReference) {
    test::for_each_isa([&](cpu::Isa isa) {
        for (bool round : {false, true}) {
            if (round && isa < Isa::kAvx512) continue;
            SCOPED_TRACE(testing::Message() << "bf16 activations rounded: " << round);
            set_bf16_round_activations(round);
            uint32_t seed = 10;
            for (int threads : {1, 2, 3}) {
                // Decode-like: 1 token top-8 of 16 (all local), odd sizes.
                check({1, 100, 33, 16, 0, 16, 8}, threads, seed++);
                // A few tokens, k = 1, EP slice [4, 12) of 16 experts.
                check({3, 64, 40, 8, 4, 16, 1}, threads, seed++);
                // GEMM path: 40 tokens over 4 local experts of 12, k = 8 -> experts with many tokens.
                check({40, 72, 50, 4, 8, 12, 8}, threads, seed++);
                // Odd hidden/inter and many idle experts.
                check({17, 33, 7, 32, 0, 64, 2}, threads, seed++);
            }
        }
        set_bf16_round_activations(false);
    });
}

// Repacked weights (the avx512 default): decode (1 token), the GEMV rows up to 12 and the row
// blocks above, inter and hidden off the 32-row panels, EP slices, the gpt-oss unit.
TEST(MoeExpertsTest, RepackedWeightsMatchReference) {
    test::for_each_isa([&](cpu::Isa) {
        uint32_t seed = 80;
        for (int threads : {1, 2, 3}) {
            check({1, 100, 33, 16, 0, 16, 8}, threads, seed++, false, false, true);
            check({3, 64, 40, 8, 4, 16, 1}, threads, seed++, false, false, true);
            check({40, 72, 50, 4, 8, 12, 8}, threads, seed++, false, false, true);
            check({17, 33, 7, 32, 0, 64, 2}, threads, seed++, false, false, true);
            check({120, 64, 96, 2, 0, 2, 2}, threads, seed++, false, false, true);  // 120 rows per expert
            check({3, 64, 40, 8, 4, 16, 1}, threads, seed++, false, true, true);
        }
        check({1, 1024, 384, 64, 0, 64, 8}, 2, seed++, false, false, true);  // the bench model's decode
    });
}

TEST(MoeExpertsTest, F32WeightsMatchReference) {
    test::for_each_isa([&](cpu::Isa) {
        uint32_t seed = 40;
        for (int threads : {1, 3}) {
            check({1, 100, 33, 16, 0, 16, 8}, threads, seed++, true);
            check({3, 64, 40, 8, 4, 16, 1}, threads, seed++, true);
            check({40, 72, 50, 4, 8, 12, 8}, threads, seed++, true);
            check({17, 33, 7, 32, 0, 64, 2}, threads, seed++, true);
        }
    });
}

// The gpt-oss unit's values: biases added, g clamped above, u into [-limit, limit], then
// (u + 1) * g * sigmoid(alpha * g).
TEST(MoeExpertsTest, GptOssUnitClampsAndAddsBiases) {
    const float bias[4] = {0.5f, -1.0f, 2.0f, 0.25f};  // one expert, inter 2: gate biases, then up
    const ExpertGlu glu{bias, 7.0f, 1.702f};
    const auto expected = [](double g, double u) { return (u + 1.0) * g / (1.0 + std::exp(-1.702 * g)); };
    EXPECT_NEAR(glu.apply(0, 2, 0, 1.0f, 3.0f), expected(1.5, 5.0), 1e-5);
    EXPECT_NEAR(glu.apply(0, 2, 1, 10.0f, -9.0f), expected(7.0, -7.0), 1e-5);  // both clamped
    EXPECT_NEAR(glu.apply(0, 2, 0, -20.0f, 20.0f), expected(-19.5, 7.0), 1e-5);
    const ExpertGlu swiglu{};
    EXPECT_TRUE(swiglu.is_swiglu());
    EXPECT_NEAR(swiglu.apply(0, 2, 0, 1.0f, 3.0f), 3.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(MoeExpertsTest, GptOssUnitMatchesReference) {
    test::for_each_isa([&](cpu::Isa) {
        uint32_t seed = 60;
        for (bool f32 : {false, true}) {
            check({1, 100, 33, 16, 0, 16, 4}, 2, seed++, f32, true);
            check({3, 64, 40, 8, 4, 16, 1}, 1, seed++, f32, true);
            check({40, 72, 50, 4, 8, 12, 8}, 3, seed++, f32, true);
        }
    });
}

TEST(MoeExpertsTest, BenchModelDecodeShape) {
    test::for_each_isa([&](cpu::Isa) {
        // Bench model (Qwen3-MoE-like): 64 experts top-8, hidden 1024, moe_intermediate_size 384.
        check({1, 1024, 384, 64, 0, 64, 8}, 2, 77);
    });
}

// The guided ranges (the GGUF experts' items) cover every item once, on any thread count.
TEST(MoeGroupingTest, ItemRangesCoverEveryItemOnce) {
    for (int threads = 1; threads <= 3; ++threads) {
        ThreadPool pool(threads);
        for (int64_t n : {0, 1, 5, 17, 384, 3072}) {
            std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
            std::atomic<int> ranges{0};
            detail::run_item_ranges(pool, n, [&](int64_t begin, int64_t end) {
                ASSERT_LT(begin, end);
                ranges.fetch_add(1);
                for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
            });
            for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)].load(), 1) << n << " " << i;
            // a step's items are taken in a few ranges (at least 1/8 of a thread's share each)
            EXPECT_LE(ranges.load(), 8 * threads + 1) << n;
        }
    }
}

}  // namespace
}  // namespace moeserve::kernels::cpu
