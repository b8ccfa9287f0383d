// Scalar reference for quantize_rows_int8: absmax, then one rounding per element.
#include <cmath>

#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::kernels::cpu {

void quantize_rows_int8_ref(const float* x, int64_t ldx, int64_t m, int64_t k, int8_t* q, int64_t ldq, float* scales) {
    for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx;
        int8_t* qi = q + i * ldq;
        float amax = 0.0f;
        for (int64_t p = 0; p < k; ++p) amax = std::fmax(amax, std::fabs(xi[p]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scales[i] = amax / 127.0f;
        for (int64_t p = 0; p < k; ++p) qi[p] = static_cast<int8_t>(std::nearbyint(xi[p] * inv));
        for (int64_t p = k; p < ldq; ++p) qi[p] = 0;
    }
}

}  // namespace moeserve::kernels::cpu
