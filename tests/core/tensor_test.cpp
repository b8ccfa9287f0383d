#include "moeserve/core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace moeserve {
namespace {

TEST(TensorTest, AlignedZeroedAndSliced) {
    Tensor t(DType::kF32, {3, 4, 5});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
    EXPECT_EQ(t.numel(), 60);
    EXPECT_EQ(t.nbytes(), 240u);
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.as<float>()[i], 0.0f);
    t.as<float>()[20] = 7.0f;
    TensorView s = t.view().slice0(1);
    EXPECT_EQ(s.shape, (Shape{4, 5}));
    EXPECT_EQ(s.as<float>()[0], 7.0f);
    TensorView r = t.view().rows(1, 3);
    EXPECT_EQ(r.shape, (Shape{2, 4, 5}));
    EXPECT_EQ(r.as<float>()[0], 7.0f);
    Tensor c = t.clone();
    EXPECT_EQ(c.as<float>()[20], 7.0f);
    EXPECT_EQ(t.view().reshape({12, 5}).shape.str(), "[12, 5]");
}

}  // namespace
}  // namespace moeserve
