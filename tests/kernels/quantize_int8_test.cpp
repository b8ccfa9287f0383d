// quantize_rows_int8 vs its scalar reference (bit-exact), odd widths, padding, zero rows, ties.
#include "moeserve/kernels/cpu/quantize_int8.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

TEST(QuantizeInt8Test, MatchesReferenceBitExact) {
    std::mt19937 rng(3);
    for (int64_t m : {1, 3, 17}) {
        for (int64_t k : {1, 7, 31, 32, 33, 100, 255}) {
            SCOPED_TRACE(testing::Message() << "m=" << m << " k=" << k);
            const int64_t ldq = int8_padded_cols(k) + 32;
            test::Floats x(m * (k + 3));
            test::fill_uniform(x.data(), m * (k + 3), rng, -5.0f, 5.0f);
            if (m > 2) {
                for (int64_t p = 0; p < k; ++p) x[2 * (k + 3) + p] = 0.0f;  // an all-zero row
            }
            std::vector<int8_t> q(static_cast<size_t>(m * ldq + 1), 99), qr(static_cast<size_t>(m * ldq + 1), 77);
            std::vector<float> s(static_cast<size_t>(m)), sr(static_cast<size_t>(m));
            quantize_rows_int8(x.data(), k + 3, m, k, q.data() + 1, ldq, s.data());
            quantize_rows_int8_ref(x.data(), k + 3, m, k, qr.data() + 1, ldq, sr.data());
            for (int64_t i = 0; i < m; ++i) {
                ASSERT_EQ(s[static_cast<size_t>(i)], sr[static_cast<size_t>(i)]) << "row " << i;
                for (int64_t p = 0; p < ldq; ++p) {
                    ASSERT_EQ(q[static_cast<size_t>(1 + i * ldq + p)], qr[static_cast<size_t>(1 + i * ldq + p)])
                        << i << "," << p;
                    if (p >= k) {
                        ASSERT_EQ(q[static_cast<size_t>(1 + i * ldq + p)], 0);
                    }
                }
            }
            if (m > 2) {
                EXPECT_EQ(s[2], 0.0f);
            }
        }
    }
}

TEST(QuantizeInt8Test, RangeAndRounding) {
    // absmax maps to +-127; halves round to even (0.5 -> 0, 1.5 -> 2).
    std::vector<float> x = {127.0f, -127.0f, 0.5f, 1.5f, -2.5f, 63.49f};
    for (int rep = 0; rep < 6; ++rep) x.push_back(0.25f * float(rep));  // reach the vector path
    x.resize(40, 3.0f);
    std::vector<int8_t> q(64);
    float s = 0.0f;
    quantize_rows_int8(x.data(), 40, 1, 40, q.data(), 64, &s);
    EXPECT_EQ(s, 1.0f);
    EXPECT_EQ(q[0], 127);
    EXPECT_EQ(q[1], -127);
    EXPECT_EQ(q[2], 0);
    EXPECT_EQ(q[3], 2);
    EXPECT_EQ(q[4], -2);
    EXPECT_EQ(q[5], 63);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
