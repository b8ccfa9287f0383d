// embedding_bf16 widens exactly (bf16 -> f32 is lossless), so the check is bit-exact.
#include "moeserve/kernels/cpu/embedding.h"

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

TEST(EmbeddingTest, RowsAreExactWidening) {
    std::mt19937 rng(6);
    for (int64_t hidden : {1, 7, 33, 1024}) {
        const int64_t vocab = 50;
        std::vector<uint16_t> table = test::random_bf16(vocab * hidden, rng, 4.0f);
        const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
        test::Floats out(int64_t(ids.size()) * hidden);
        embedding_bf16(table.data(), vocab, hidden, ids.data(), int64_t(ids.size()), out.data());
        for (size_t t = 0; t < ids.size(); ++t) {
            for (int64_t i = 0; i < hidden; ++i) {
                ASSERT_EQ(out[int64_t(t) * hidden + i], bf16_to_f32(table[size_t(ids[t] * hidden + i)]));
            }
        }
    }
}

}  // namespace
}  // namespace moeserve::kernels::cpu
