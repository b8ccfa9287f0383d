// W4A8's activation quantization (shared by every ISA level) and its scalar tile.
#include "moeserve/kernels/cpu/linear_w4a8.h"

#include <cstring>

#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::kernels::cpu {

W4a8Rows quantize_w4a8_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t group_size, W4a8Buffer& buf) {
    const int64_t ldq = w4a8_padded_cols(k), ldg = int4_groups(k, group_size);
    buf.q.assign(size_t(m * ldq), 0);
    buf.sx.resize(size_t(m));
    buf.qsum.resize(size_t(m * ldg));
    std::vector<int8_t> row(static_cast<size_t>(ldq));
    for (int64_t i = 0; i < m; ++i) {
        quantize_rows_int8(x + i * ldx, ldx, 1, k, row.data(), k, &buf.sx[size_t(i)]);
        int8_t* q = buf.q.data() + i * ldq;
        float* sums = buf.qsum.data() + i * ldg;
        std::memset(sums, 0, size_t(ldg) * sizeof(float));
        int32_t sum = 0;
        for (int64_t p = 0; p < k; ++p) {
            q[w4a8_position(p)] = row[size_t(p)];
            sum += row[size_t(p)];
            if ((p + 1) % group_size == 0 || p + 1 == k) {
                sums[p / group_size] = static_cast<float>(sum);  // |sum| < 2^24 for any k this takes
                sum = 0;
            }
        }
    }
    return {buf.q.data(), buf.sx.data(), buf.qsum.data(), ldq, ldg};
}

namespace detail {

bool w4a8_vector_shape(const Int4Weights& w) {
    const int64_t gs = w.group_size;
    return w.k % 32 == 0 && (gs >= w.k || (gs % 32 == 0 && (gs % kW4a8Chunk == 0 || kW4a8Chunk % gs == 0)));
}

void matmul_tile_w4a8_ref(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo) {
    const int64_t ng = w.groups();
    for (int64_t j = 0; j < w.n; ++j) {
        const uint8_t* codes = w.codes + j * (w.k / 2);
        for (int64_t i = 0; i < m; ++i) {
            const int8_t* q = a.q + i * a.ldq;
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; ++g) {
                const int64_t p1 = (g + 1) * w.group_size < w.k ? (g + 1) * w.group_size : w.k;
                int32_t dot = 0;
                for (int64_t p = g * w.group_size; p < p1; ++p) {
                    dot += ((codes[p / 2] >> (4 * (p & 1))) & 0x0F) * int32_t{q[w4a8_position(p)]};
                }
                const auto zero = static_cast<int32_t>(w.zero[j * ng + g]);
                const auto qsum = static_cast<int32_t>(a.qsum[i * a.ldg + g]);
                acc += w.scale[j * ng + g] * static_cast<float>(dot - zero * qsum);
            }
            out[i * ldo + j] = a.sx[i] * acc;
        }
    }
}

}  // namespace detail

}  // namespace moeserve::kernels::cpu
