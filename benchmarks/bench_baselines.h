// Baselines measured in the same process as the kernels they are compared with: a STREAM-style
// read (sum of a buffer, 2 threads, cycling over copies so the bytes come from DRAM, not L3) and
// OpenBLAS cblas_sgemm with f32 weights. Shared by linear_bench.cpp and moe_bench.cpp.
#pragma once

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "moeserve/core/thread_pool.h"

namespace moeserve::bench {

// Enough distinct bytes that cycling through them evicts the 260 MiB L3 of the bench machine.
inline constexpr int64_t kColdBytes = int64_t{768} << 20;

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Number of copies of a `bytes`-sized buffer needed to cycle through kColdBytes.
inline int64_t cold_copies(int64_t bytes) { return std::max<int64_t>(2, (kColdBytes + bytes - 1) / bytes); }

// Sums `bytes` bytes at p with all pool threads (4 independent accumulators each); returns a
// value that depends on every byte so the compiler keeps the loads.
inline float stream_read(ThreadPool& pool, const uint8_t* p, int64_t bytes) {
    const int64_t n = bytes / 32;
    std::vector<float> partial(size_t(pool.num_threads()) * 16, 0.0f);
    pool.run([&](int tid) {
        const int64_t t = pool.num_threads();
        const int64_t b = n * tid / t, e = n * (tid + 1) / t;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        const float* f = reinterpret_cast<const float*>(p);
        int64_t i = b;
        for (; i + 4 <= e; i += 4) {
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(f + 8 * i));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(f + 8 * i + 8));
            a2 = _mm256_add_ps(a2, _mm256_loadu_ps(f + 8 * i + 16));
            a3 = _mm256_add_ps(a3, _mm256_loadu_ps(f + 8 * i + 24));
        }
        for (; i < e; ++i) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(f + 8 * i));
        _mm256_storeu_ps(partial.data() + tid * 16, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    });
    float s = 0;
    for (float v : partial) s += v;
    return s;
}

// Median of the samples (robust to the other processes sharing the two cores).
inline double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
}

// STREAM-style read bandwidth (GB/s) for chunks of `bytes` bytes, cycling once over the copies
// in `buf` (cold_copies(bytes) chunks back to back): bytes / median time per chunk.
inline double stream_gbps(ThreadPool& pool, const uint8_t* buf, int64_t bytes) {
    const int64_t copies = cold_copies(bytes);
    volatile float sink = 0;
    std::vector<double> times;
    for (int64_t c = 0; c < copies; ++c) {
        const double t0 = now_s();
        sink = sink + stream_read(pool, buf + c * bytes, bytes);
        times.push_back(now_s() - t0);
    }
    return double(bytes) / median(times) / 1e9;
}

// Median time (s) of out[m, n] = x[m, k] @ w[n, k]^T by cblas_sgemm (row-major, W transposed).
inline double sgemm_seconds(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* out, int reps) {
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, x, int(k), w, int(k), 0.0f,
                    out, int(n));
        times.push_back(now_s() - t0);
    }
    return median(times);
}

inline std::string openblas_description() {
    return std::string(openblas_get_corename()) + " / " + openblas_get_config() + " / threads " +
           std::to_string(openblas_get_num_threads());
}

}  // namespace moeserve::bench
