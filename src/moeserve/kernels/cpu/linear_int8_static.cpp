// linear_int8_static (see linear_int8_static.h): static quantization of the activations (per
// tensor, or per input channel by a divisor), the full-range int8 tile of the active ISA, then the int32 bias and the
// per-channel dequantization scale.
#include "moeserve/kernels/cpu/linear_int8_static.h"

#include <cmath>
#include <vector>

#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"
#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::kernels::cpu {

namespace {
constexpr int64_t kMinParallelMacs = 1 << 15;

inline int8_t saturate(float scaled, float zero) {
    const float v = std::nearbyint(scaled + zero);
    return static_cast<int8_t>(v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v);
}

inline int8_t quantize_one(float x, float mul, float zero) {
    return saturate(x * mul, zero);  // x * mul rounded to f32 first (-std=c++20: no contraction)
}

// out[i, j] = (float(acc) + float(bias[j])) * deq[j], acc = out[i, j] as the tile left it.
void finish(float* out, int64_t ldo, int64_t m, int64_t j0, int64_t j1, const StaticInt8Weights& w) {
    for (int64_t i = 0; i < m; ++i) {
        float* o = out + i * ldo;
        for (int64_t j = j0; j < j1; ++j) {
            const float b = w.bias ? static_cast<float>(w.bias[j]) : 0.0f;
            o[j] = (o[j] + b) * w.deq_scale[j];
        }
    }
}
}  // namespace

namespace detail {
void matmul_tile_int8_full(const int8_t* qx, int64_t ldx, int64_t m, int64_t k, const int8_t* w, int64_t n, float* out,
                           int64_t ldo, const float* ones) {
    // NOTE(#20): the AVX2 sign-trick tile needs activations in [-127, 127]; static activations
    // reach -128, so AVX2 takes its int16 path. The VNNI tile is exact for -128 already.
    switch (active_isa()) {
        case Isa::kRef:
            matmul_tile_int8_ref(qx, ldx, ones, m, k, w, ones, n, out, ldo);
            return;
        case Isa::kAvx2:
            matmul_tile_int8_avx2_int16(qx, ldx, ones, m, k, w, ones, n, out, ldo);
            return;
        case Isa::kAvx512:
        case Isa::kAmx:
            matmul_tile_int8_avx512(qx, ldx, ones, m, k, w, ones, n, out, ldo, gemv_row_blocks());
            return;
    }
}
}  // namespace detail

void quantize_rows_int8_static(const float* x, int64_t m, int64_t k, float x_mul, float x_zero, int8_t* q,
                               int64_t ldq) {
    for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * k;
        int8_t* qi = q + i * ldq;
        for (int64_t p = 0; p < k; ++p) qi[p] = quantize_one(xi[p], x_mul, x_zero);
        for (int64_t p = k; p < ldq; ++p) qi[p] = 0;
    }
}

void quantize_rows_int8_static_div(const float* x, int64_t m, int64_t k, const float* x_div, float x_zero, int8_t* q,
                                   int64_t ldq) {
    for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * k;
        int8_t* qi = q + i * ldq;
        for (int64_t p = 0; p < k; ++p) qi[p] = saturate(xi[p] / x_div[p], x_zero);
        for (int64_t p = k; p < ldq; ++p) qi[p] = 0;
    }
}

namespace {
void quantize_static(const float* x, int64_t m, const StaticInt8Weights& w, int8_t* q, int64_t ldq) {
    if (w.x_div != nullptr) {
        quantize_rows_int8_static_div(x, m, w.k, w.x_div, w.x_zero, q, ldq);
    } else {
        quantize_rows_int8_static(x, m, w.k, w.x_mul, w.x_zero, q, ldq);
    }
}
}  // namespace

void linear_int8_static(ThreadPool& pool, const float* x, int64_t m, const StaticInt8Weights& w, float* out,
                        Int8Scratch& s) {
    if (m <= 0) return;
    const int64_t k = w.k, n = w.n;
    const int64_t ldq = int8_padded_cols(k);
    s.qx.resize(static_cast<size_t>(m * ldq));
    quantize_static(x, m, w, s.qx.data(), ldq);
    s.sx.assign(static_cast<size_t>(m > n ? m : n), 1.0f);  // unit scales: the tile leaves float(acc)
    auto slice = [&](int64_t j0, int64_t j1) {
        detail::matmul_tile_int8_full(s.qx.data(), ldq, m, k, w.w + j0 * k, j1 - j0, out + j0, n, s.sx.data());
        finish(out, n, m, j0, j1, w);
    };
    const bool parallel = pool.num_threads() > 1 && m * n * k >= kMinParallelMacs && n >= 16;
    if (!parallel) {
        slice(0, n);
        return;
    }
    pool.parallel_for(n, slice, 8);
}

void linear_int8_static_ref(const float* x, int64_t m, const StaticInt8Weights& w, float* out) {
    std::vector<int8_t> q(static_cast<size_t>(w.k));
    for (int64_t i = 0; i < m; ++i) {
        quantize_static(x + i * w.k, 1, w, q.data(), w.k);
        for (int64_t j = 0; j < w.n; ++j) {
            int32_t acc = 0;
            for (int64_t p = 0; p < w.k; ++p) acc += int32_t{q[size_t(p)]} * int32_t{w.w[j * w.k + p]};
            const float b = w.bias ? static_cast<float>(w.bias[j]) : 0.0f;
            out[i * w.n + j] = (static_cast<float>(acc) + b) * w.deq_scale[j];
        }
    }
}

}  // namespace moeserve::kernels::cpu
