// rms_norm / add_rms_norm vs the scalar reference, in place and out of place, 1-3 threads.
#include "moeserve/kernels/cpu/norm.h"

#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace moeserve::kernels::cpu {
namespace {

using test::Floats;

TEST(NormTest, RmsNormMatchesReference) {
    std::mt19937 rng(3);
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        for (int64_t rows : {1, 3, 17, 255}) {
            for (int64_t dim : {1, 7, 33, 100, 128, 1000}) {
                SCOPED_TRACE(testing::Message() << rows << "x" << dim << " t" << threads);
                Floats x(rows * dim), w(dim), out(rows * dim), ref(rows * dim);
                test::fill_uniform(x.data(), rows * dim, rng, -3.0f, 3.0f);
                test::fill_uniform(w.data(), dim, rng, 0.5f, 1.5f);
                rms_norm(pool, x.data(), w.data(), rows, dim, 1e-6f, out.data());
                rms_norm_ref(x.data(), w.data(), rows, dim, 1e-6f, ref.data());
                test::expect_close(out.data(), ref.data(), rows * dim, 1e-5f, "rms_norm");
                rms_norm(pool, x.data(), w.data(), rows, dim, 1e-6f, x.data());  // in place
                test::expect_close(x.data(), ref.data(), rows * dim, 1e-5f, "rms_norm in place");
            }
        }
    }
}

TEST(NormTest, AddRmsNormUpdatesResidualAndNormalizes) {
    std::mt19937 rng(4);
    ThreadPool pool(2);
    const int64_t rows = 17, dim = 1000;
    Floats res(rows * dim), x(rows * dim), w(dim), out(rows * dim), sum(rows * dim), ref(rows * dim);
    test::fill_uniform(res.data(), rows * dim, rng);
    test::fill_uniform(x.data(), rows * dim, rng);
    test::fill_uniform(w.data(), dim, rng);
    for (int64_t i = 0; i < rows * dim; ++i) sum[i] = res[i] + x[i];
    rms_norm_ref(sum.data(), w.data(), rows, dim, 1e-5f, ref.data());
    add_rms_norm(pool, res.data(), x.data(), w.data(), rows, dim, 1e-5f, out.data());
    for (int64_t i = 0; i < rows * dim; ++i) ASSERT_EQ(res[i], sum[i]) << i;
    test::expect_close(out.data(), ref.data(), rows * dim, 1e-5f, "add_rms_norm");
}

}  // namespace
}  // namespace moeserve::kernels::cpu
