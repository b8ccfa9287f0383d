// Scalar W4A16: dequantize a weight row to f32, then plain f32 dot products (the `ref` ISA level
// and the tests' reference).
#include <algorithm>
#include <vector>

#include "moeserve/kernels/cpu/linear_int4.h"

namespace moeserve::kernels::cpu {

void dequantize_int4_row(const Int4Weights& w, int64_t j, float* out) {
    const int64_t ng = w.groups();
    const uint8_t* row = w.codes + j * (w.k / 2);
    for (int64_t p = 0; p < w.k; ++p) {
        const int64_t g = p / w.group_size;
        const int code = (row[p / 2] >> (4 * (p & 1))) & 0x0F;
        // (code - zero) is exact in f32, so this is the one rounding every path makes
        out[p] = (static_cast<float>(code) - w.zero[j * ng + g]) * w.scale[j * ng + g];
    }
}

namespace detail {

void matmul_tile_int4_ref(const float* x, int64_t ldx, int64_t m, const Int4Weights& w, float* out, int64_t ldo) {
    std::vector<float> row(static_cast<size_t>(w.k));
    for (int64_t j = 0; j < w.n; ++j) {
        dequantize_int4_row(w, j, row.data());
        for (int64_t i = 0; i < m; ++i) {
            float acc = 0.0f;
            for (int64_t p = 0; p < w.k; ++p) acc += x[i * ldx + p] * row[static_cast<size_t>(p)];
            out[i * ldo + j] = acc;
        }
    }
}

}  // namespace detail

void linear_int4_ref(const float* x, int64_t m, const Int4Weights& w, float* out) {
    detail::matmul_tile_int4_ref(x, w.k, m, w, out, w.n);
}

}  // namespace moeserve::kernels::cpu
