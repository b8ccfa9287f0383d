// silu_mul vs the scalar reference, including large |gate| where exp saturates.
#include "moeserve/kernels/cpu/activation.h"

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

TEST(ActivationTest, SiluMulMatchesReference) {
    std::mt19937 rng(5);
    for (int64_t rows : {1, 3, 17}) {
        for (int64_t inter : {1, 7, 33, 100, 384}) {
            SCOPED_TRACE(testing::Message() << rows << "x" << inter);
            test::Floats gu(rows * 2 * inter), out(rows * inter), ref(rows * inter);
            test::fill_uniform(gu.data(), rows * 2 * inter, rng, -20.0f, 20.0f);
            gu[0] = -100.0f;  // exp(100) overflows a naive silu
            silu_mul(gu.data(), rows, inter, out.data());
            silu_mul_ref(gu.data(), rows, inter, ref.data());
            test::expect_close(out.data(), ref.data(), rows * inter, 1e-6f, "silu_mul");
        }
    }
}

}  // namespace
}  // namespace moeserve::kernels::cpu
