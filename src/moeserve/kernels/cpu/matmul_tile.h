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

// Rows rounded once for several bf16-weight tiles. When matmul_tile on bf16 weights would round
// its m rows of x to bf16 (the avx512 GEMM under bf16_round_activations(), isa.h), a caller that
// runs several tiles over the same rows (each expert's row blocks, a linear's column chunks)
// rounds them once with round_rows_bf16 and runs matmul_tile_rounded on them: the same results,
// without rounding x again in every tile.
bool matmul_rounds_x(int64_t m);
// The row stride of rounded rows: k rounded up to a multiple of 32.
int64_t rounded_row_stride(int64_t k);
// xb[i * rounded_row_stride(k) + p] = bf16(x[i * ldx + p]) (round to nearest even), zero for
// p in [k, rounded_row_stride(k)). Only where matmul_rounds_x.
void round_rows_bf16(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* xb);
// matmul_tile on rows rounded by round_rows_bf16 (equal to matmul_tile on the f32 rows where
// matmul_rounds_x(m)).
void matmul_tile_rounded(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                         int64_t ldo, float* pack);

}  // namespace moeserve::kernels::cpu::detail
