// argmax (AVX2) vs its scalar reference: odd lengths, ties (lowest index wins), NaNs, -inf.
#include "moeserve/kernels/cpu/sample.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace moeserve::kernels::cpu {
namespace {

TEST(ArgmaxTest, MatchesReferenceOnRandomAndTiedValues) {
    std::mt19937 rng(11);
    for (int64_t n : {1, 3, 17, 63, 64, 65, 255, 1000, 151936}) {
        for (int levels : {0, 4}) {  // 0: continuous values; 4: few distinct values, many ties
            SCOPED_TRACE(testing::Message() << "n=" << n << " levels=" << levels);
            std::vector<float> v(static_cast<size_t>(n));
            std::uniform_real_distribution<float> u(-5.0f, 5.0f);
            std::uniform_int_distribution<int> d(0, levels > 0 ? levels - 1 : 0);
            for (auto& x : v) x = levels > 0 ? static_cast<float>(d(rng)) : u(rng);
            EXPECT_EQ(argmax(v.data(), n), argmax_ref(v.data(), n));
        }
    }
}

TEST(ArgmaxTest, TiesPickLowestIndexAcrossLanes) {
    std::vector<float> v(1000, 0.0f);
    v[777] = 2.0f;
    v[130] = 2.0f;  // a different lane, earlier
    v[999] = 2.0f;  // the scalar tail
    EXPECT_EQ(argmax(v.data(), 1000), 130);
    std::vector<float> all_equal(300, -1.0f);
    EXPECT_EQ(argmax(all_equal.data(), 300), 0);
}

TEST(ArgmaxTest, NaNAndInfinityBehaveLikeTheScalarLoop) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> v(500, -inf);
    EXPECT_EQ(argmax(v.data(), 500), 0);
    v[40] = nan;
    v[41] = 1.0f;
    v[490] = nan;
    EXPECT_EQ(argmax(v.data(), 500), 41);
    v[0] = nan;  // scalar loop: nothing compares greater than a NaN start
    EXPECT_EQ(argmax(v.data(), 500), argmax_ref(v.data(), 500));
    EXPECT_EQ(argmax(v.data(), 500), 0);
    v[0] = 0.0f;
    v[300] = inf;
    EXPECT_EQ(argmax(v.data(), 500), 300);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
