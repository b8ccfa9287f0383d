// Scalar W4A16: dequantize a weight row to f32, then plain f32 dot products (the `ref` ISA level
// and the tests' reference); W4A8 (int8_activations) through the scalar W4A8 tile.
#include <algorithm>
#include <vector>

#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/linear_w4a8.h"
#include "moeserve/kernels/cpu/quantize_int8.h"

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
    if (!w.int8_activations) {
        detail::matmul_tile_int4_ref(x, w.k, m, w, out, w.n);
        return;
    }
    // W4A8: the scalar quantizer, then the scalar tile
    const int64_t ldq = w4a8_padded_cols(w.k), ng = w.groups();
    std::vector<int8_t> row(static_cast<size_t>(w.k)), q(static_cast<size_t>(m * ldq), 0);
    std::vector<float> sx(static_cast<size_t>(m)), qsum(static_cast<size_t>(m * ng), 0.0f);
    for (int64_t i = 0; i < m; ++i) {
        quantize_rows_int8_ref(x + i * w.k, w.k, 1, w.k, row.data(), w.k, &sx[size_t(i)]);
        for (int64_t p = 0; p < w.k; ++p) {
            q[size_t(i * ldq + w4a8_position(p))] = row[size_t(p)];
            qsum[size_t(i * ng + p / w.group_size)] += static_cast<float>(row[size_t(p)]);  // exact integers
        }
    }
    detail::matmul_tile_w4a8_ref({q.data(), sx.data(), qsum.data(), ldq, ng}, m, w, out, w.n);
}

}  // namespace moeserve::kernels::cpu
