// Scalar references for linear_bf16 / linear_f32: one dot product per output, in order.
#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/linear.h"

namespace moeserve::kernels::cpu {

void linear_bf16_ref(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * double(bf16_to_f32(w[j * k + p]));
            out[i * n + j] = static_cast<float>(acc);
        }
    }
}

void linear_f32_ref(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* out) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * double(w[j * k + p]);
            out[i * n + j] = static_cast<float>(acc);
        }
    }
}

}  // namespace moeserve::kernels::cpu
