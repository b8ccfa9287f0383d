// W4A8's activation quantization (shared by every ISA level) and its scalar tile.
#include "moeserve/kernels/cpu/linear_w4a8.h"

#include <vector>

#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::kernels::cpu {

namespace {

// Below this many activation values one thread quantizes them all (waking the pool costs more).
constexpr int64_t kMinParallelValues = 1 << 14;

// One row x [k] quantized into the chunk order at q, with its scale and group sums.
void quantize_row(const float* x, int64_t k, int64_t group_size, int8_t* q, float* sx, float* sums) {
    thread_local std::vector<int8_t> row;
    row.resize(static_cast<size_t>(k));
    quantize_rows_int8(x, k, 1, k, row.data(), k, sx);
    for (int64_t c0 = 0; c0 < k; c0 += kW4a8Chunk) {
        const int64_t pairs = (k - c0 < kW4a8Chunk ? k - c0 : kW4a8Chunk) / 2;
        const int8_t* src = row.data() + c0;
        for (int64_t i = 0; i < pairs; ++i) {
            q[c0 + i] = src[2 * i];
            q[c0 + kW4a8Chunk / 2 + i] = src[2 * i + 1];
        }
    }
    for (int64_t g = 0, p0 = 0; p0 < k; ++g, p0 += group_size) {
        const int64_t p1 = p0 + group_size < k ? p0 + group_size : k;
        int32_t sum = 0;
        for (int64_t p = p0; p < p1; ++p) sum += row[static_cast<size_t>(p)];
        sums[g] = static_cast<float>(sum);  // |sum| < 2^24 for any k this takes
    }
}

}  // namespace

W4a8Rows quantize_w4a8_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t group_size, W4a8Buffer& buf,
                            ThreadPool* pool) {
    const int64_t ldq = w4a8_padded_cols(k), ldg = int4_groups(k, group_size);
    buf.q.assign(size_t(m * ldq), 0);
    buf.sx.resize(size_t(m));
    buf.qsum.resize(size_t(m * ldg));
    auto rows = [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            quantize_row(x + i * ldx, k, group_size, buf.q.data() + i * ldq, &buf.sx[size_t(i)],
                         buf.qsum.data() + i * ldg);
        }
    };
    if (pool != nullptr && pool->num_threads() > 1 && m > 1 && m * k >= kMinParallelValues) {
        pool->parallel_for(m, rows);
    } else {
        rows(0, m);
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
