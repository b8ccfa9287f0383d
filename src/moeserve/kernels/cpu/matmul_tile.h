// Internal single-threaded matmul building blocks shared by linear_avx2.cpp and
// moe_experts_avx2.cpp: out[m, n] (+)= x[m, k] @ w[n, k]^T on one thread, GEMV for few rows and
// a packed, register-blocked GEMM for many. Callers split the work across threads.
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu::detail {

// Rows up to this many take the GEMV path (weights streamed once, no packing).
inline constexpr int64_t kGemvMaxRows = 8;
// Floats of packing workspace one matmul_tile call needs (one per thread).
int64_t matmul_pack_floats();

// out[i * ldo + j] = sum_p x[i * ldx + p] * w[j * k + p], for i < m, j < n; single-threaded.
// pack: at least matmul_pack_floats() floats (only touched when m > kGemvMaxRows).
void matmul_tile(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                 int64_t ldo, float* pack);
void matmul_tile(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* out, int64_t ldo,
                 float* pack);

}  // namespace moeserve::kernels::cpu::detail
