// apply_rope vs the scalar reference: both styles, rotary_dim < head_dim (the tail must stay
// untouched), padded head/token strides, positions out of order.
#include "moeserve/kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

TEST(RopeTest, MatchesReference) {
    std::mt19937 rng(8);
    const int64_t max_pos = 64;
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
        // (head_dim, rotary_dim): Qwen3 128/128, DeepSeek-V3 q_pe 64/64, partial 96/32, odd 7/6.
        for (auto [head_dim, rot] :
             {std::pair{128, 128}, std::pair{64, 64}, std::pair{96, 32}, std::pair{7, 6}, std::pair{40, 2}}) {
            const int64_t tokens = 5, heads = 3, head_stride = head_dim + 1;
            const int64_t token_stride = heads * head_stride + 3;
            std::vector<float> cs(size_t(max_pos * rot / 2)), sn(cs.size());
            for (int64_t p = 0; p < max_pos; ++p) {
                for (int64_t i = 0; i < rot / 2; ++i) {
                    const double ang = double(p) * std::pow(10000.0, -2.0 * double(i) / double(rot));
                    cs[size_t(p * rot / 2 + i)] = float(std::cos(ang));
                    sn[size_t(p * rot / 2 + i)] = float(std::sin(ang));
                }
            }
            const std::vector<int32_t> pos = {7, 3, 63, 0, 3};
            test::Floats x(tokens * token_stride), ref(tokens * token_stride);
            test::fill_uniform(x.data(), tokens * token_stride, rng);
            for (int64_t i = 0; i < tokens * token_stride; ++i) ref[i] = x[i];
            RopeArgs a{x.data(), tokens,     heads,     head_stride, token_stride,
                       rot,      pos.data(), cs.data(), sn.data(),   style};
            apply_rope(a);
            a.x = ref.data();
            apply_rope_ref(a);
            test::expect_close(x.data(), ref.data(), tokens * token_stride, 1e-6f, "rope");
        }
    }
}

}  // namespace
}  // namespace moeserve::kernels::cpu
