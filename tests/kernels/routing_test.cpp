// softmax_topk vs a reference that sorts (probability descending, id ascending), incl. ties.
#include "moeserve/kernels/cpu/routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

void sorted_reference(const float* l, int64_t e, int k, bool renorm, int32_t* ids, float* w) {
    std::vector<double> p(static_cast<size_t>(e));
    const double mx = *std::max_element(l, l + e);
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += p[size_t(i)] = std::exp(double(l[i]) - mx);
    std::vector<int32_t> order(static_cast<size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
    double top = 0;
    for (int j = 0; j < k; ++j) top += p[size_t(order[size_t(j)])] / sum;
    for (int j = 0; j < k; ++j) {
        ids[j] = order[size_t(j)];
        w[j] = float(p[size_t(ids[j])] / sum / (renorm ? top : 1.0));
    }
}

TEST(RoutingTest, MatchesSortingReference) {
    std::mt19937 rng(7);
    // Qwen3-30B-A3B: 128 experts top-8; bench model: 64 experts top-8; Mixtral: 8 top-2.
    for (auto [e, k] : {std::pair{64, 8}, std::pair{128, 8}, std::pair{8, 2}, std::pair{5, 1}, std::pair{7, 7}}) {
        for (bool renorm : {false, true}) {
            const int64_t tokens = 17;
            test::Floats logits(tokens * e);
            test::fill_uniform(logits.data(), tokens * e, rng, -4.0f, 4.0f);
            std::vector<int32_t> ids(size_t(tokens * k)), rids(ids.size());
            std::vector<float> w(ids.size()), rw(ids.size());
            softmax_topk(logits.data(), tokens, e, k, renorm, ids.data(), w.data());
            for (int64_t t = 0; t < tokens; ++t) {
                sorted_reference(logits.data() + t * e, e, k, renorm, rids.data() + t * k, rw.data() + t * k);
            }
            EXPECT_EQ(ids, rids) << "e=" << e << " k=" << k;
            test::expect_close(w.data(), rw.data(), int64_t(w.size()), 1e-6f, "weights");
        }
    }
}

TEST(RoutingTest, TiesGoToLowerExpertId) {
    const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 0.5f, 2.0f, 1.0f};
    std::vector<int32_t> ids(4);
    std::vector<float> w(4);
    softmax_topk(logits.data(), 1, 6, 4, true, ids.data(), w.data());
    EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 4, 0}));
    EXPECT_FLOAT_EQ(w[0], w[1]);
    EXPECT_FLOAT_EQ(w[1], w[2]);
    EXPECT_NEAR(w[0] + w[1] + w[2] + w[3], 1.0f, 1e-6f);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
