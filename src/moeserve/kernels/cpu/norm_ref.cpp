// Scalar reference for rms_norm (double accumulation of the mean square).
#include <cmath>

#include "moeserve/kernels/cpu/norm.h"

namespace moeserve::kernels::cpu {

void rms_norm_ref(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        double ss = 0.0;
        for (int64_t i = 0; i < dim; ++i) ss += double(xr[i]) * double(xr[i]);
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss / double(dim)) + eps);
        for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = xr[i] * inv * weight[i];
    }
}

}  // namespace moeserve::kernels::cpu
