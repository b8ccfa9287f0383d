// bf16 linear weights repacked once at load into the layout the AVX-512 kernel reads (#29), so
// no step widens or packs them again.
//
// Why: the row-major kernels (linear.h) pay per call for the layout. The GEMM (m > 8 rows) widens
// every 256 x 256 weight block to f32 panels before using them, which at a serving batch of 32
// sequences is most of the lm_head's time; the GEMV reads several rows at once, each its own
// stream. Here the weights are stored as the panels, still bf16: one sequential stream per
// thread, widened in registers, the same f32 products and sums.
//
// Layout: panel q holds output rows [32 q, 32 q + 32) (rows past n are zero) as k groups of 32
// bf16, one per input column p, 64 bytes each, so a panel is 64 k bytes and panels follow one
// another. In group p, element 2 j is row 32 q + j and element 2 j + 1 is row 32 q + 16 + j
// (j < 16): read as 16 32-bit lanes, the low halves are rows 0-15 and the high halves rows
// 16-31, each made an exact f32 by one shift or one mask.
//
// Results: f32 FMA over k in order, per output, like the row-major kernels (the same 2e-6 k bound
// in the tests).
#pragma once

#include <cstddef>
#include <cstdint>

#include "moeserve/core/thread_pool.h"

namespace moeserve::kernels::cpu {

inline constexpr int64_t kBf16PanelRows = 32;
// Up to this many rows of x, the kernel reads each panel once for all of them (a GEMV); above,
// in blocks of x rows and k columns that stay in cache (a GEMM).
inline constexpr int64_t kBf16PanelGemvRows = 12;

// Bytes of w [n, k] repacked.
size_t bf16_panel_bytes(int64_t n, int64_t k);

// w bf16 [n, k] (row stride ldw) -> dst, which holds bf16_panel_bytes(n, k) bytes and is 64-byte
// aligned; the panels are shared out among the pool's threads.
void pack_bf16_panels(ThreadPool& pool, const uint16_t* w, int64_t ldw, int64_t n, int64_t k, uint16_t* dst);

// Element [row, col] of a repacked [n, k] matrix.
uint16_t bf16_panel_at(const uint16_t* panels, int64_t k, int64_t row, int64_t col);
// The repacked [n, k] matrix back as rows w [n, k] (references, tests).
void unpack_bf16_panels(const uint16_t* panels, int64_t n, int64_t k, uint16_t* w);

// out f32 [m, n] = x f32 [m, k] @ W^T, W repacked by pack_bf16_panels (linear_bf16's contract).
void linear_bf16_panels(ThreadPool& pool, const float* x, int64_t m, int64_t k, const uint16_t* panels, int64_t n,
                        float* out);

// The panels of `rows` weight rows: ceil(rows / 32).
int64_t bf16_panel_count(int64_t rows);

namespace detail {
// Single-threaded: out[i * ldo + j] = sum_p x[i * ldx + p] * W[j, p] for i < m and the rows j in
// panels [q0, q1) below n (W's rows; n - 32 q0 may be less than 32 (q1 - q0) for the last panel).
// out points at row 0's output of panel 0. The active level's tile (bf16_panels.cpp).
void bf16_panels_tile(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* panels, int64_t q0, int64_t q1,
                      int64_t n, float* out, int64_t ldo);
// Portable (every level below avx512) and AVX-512 (bf16_panels_avx512.cpp).
void bf16_panels_tile_portable(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* panels, int64_t q0,
                               int64_t q1, int64_t n, float* out, int64_t ldo);
void bf16_panels_tile_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* panels, int64_t q0,
                             int64_t q1, int64_t n, float* out, int64_t ldo);
}  // namespace detail

}  // namespace moeserve::kernels::cpu
