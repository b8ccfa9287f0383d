// Scalar reference for linear_int8: quantize each row, exact int32 dot products, one rescale.
#include <vector>

#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::kernels::cpu {

void linear_int8_ref(const float* x, int64_t m, int64_t k, const int8_t* w, const float* w_scale, int64_t n,
                     float* out) {
    std::vector<int8_t> q(static_cast<size_t>(k));
    for (int64_t i = 0; i < m; ++i) {
        float sx = 0.0f;
        quantize_rows_int8_ref(x + i * k, k, 1, k, q.data(), k, &sx);
        for (int64_t j = 0; j < n; ++j) {
            int32_t acc = 0;
            for (int64_t p = 0; p < k; ++p) acc += int32_t{q[size_t(p)]} * int32_t{w[j * k + p]};
            out[i * n + j] = static_cast<float>(acc) * (sx * w_scale[j]);
        }
    }
}

}  // namespace moeserve::kernels::cpu
