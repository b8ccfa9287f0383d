// Internal: the per-ISA GGUF dot products behind gguf_vec_dot (gguf_dot.h), picked in
// dispatch.cpp. Plain types only, as matmul_tile_isa.h explains. nb = number of weight blocks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moeserve/kernels/cpu/gguf_dot.h"

namespace moeserve::kernels::cpu::detail {

// quantize_gguf_activations' AVX2 code (gguf_quantize_avx2.cpp): n a multiple of the block.
void quantize_q8_0_avx2(const float* x, void* dst, int64_t n);
void quantize_q8_k_avx2(const float* x, void* dst, int64_t n);

float vec_dot_q4_0_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q4_1_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q5_0_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q5_1_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q8_0_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_mxfp4_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q2_k_q8_k_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q3_k_q8_k_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q4_k_q8_k_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q5_k_q8_k_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q6_k_q8_k_avx2(int64_t nb, const void* w, const void* a);
// AVX2 tiles for rows x cols (1..4 each) with the bits of the pair kernels above
// (gguf_tiles_avx2.cpp): every type but FP8; null for one activation row, which the pair kernels
// take row after row.
GgufTileFn gguf_tile_avx2(GgmlType type, int rows, int cols);

// AVX-512 VNNI: the tile kernel of `type` for rows x cols (1..4 each), null for a type without
// one; the pair kernels are its 1 x 1 tiles. The 32-element types' tiles take their q8_0 rows
// prepared (gguf_prepare_avx512, null for the others): kGgufPreparedStepBytes per two blocks.
GgufTileFn gguf_tile_avx512(GgmlType type, int rows, int cols);
GgufPrepareFn gguf_prepare_avx512(GgmlType type);
inline constexpr size_t kGgufPreparedStepBytes = 192;
inline constexpr int kGgufDotScratchSlot = 5;  // thread_scratch slot of the pair kernels' prepared row
float vec_dot_q4_0_q8_0_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q5_0_q8_0_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q8_0_q8_0_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_mxfp4_q8_0_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q2_k_q8_k_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q3_k_q8_k_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q4_k_q8_k_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q5_k_q8_k_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q6_k_q8_k_avx512(int64_t nb, const void* w, const void* a);

// FP8 rows (kF8E4M3x128) with f32 activation rows: tiles for rows x cols (1..4 each) and the
// pair kernel, its 1 x 1 tile (gguf_dot_f8_avx2.cpp / gguf_dot_f8_avx512.cpp).
GgufTileFn f8_tile_avx2(int rows, int cols);
GgufTileFn f8_tile_avx512(int rows, int cols);
float vec_dot_f8_f32_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_f8_f32_avx512(int64_t nb, const void* w, const void* a);
// FP8 rows widened once for many activation rows (GgufTiles::widen): dst f32 [rows, nb * 128]
// holds each weight as the tiles compute it, and the f32 tiles over those rows give the FP8
// tiles' bits (w_stride in bytes, as for every tile).
void f8_widen_avx2(int64_t nb, int rows, const uint8_t* w, size_t w_stride, float* dst);
void f8_widen_avx512(int64_t nb, int rows, const uint8_t* w, size_t w_stride, float* dst);
GgufTileFn f32_tile_avx2(int rows, int cols);
GgufTileFn f32_tile_avx512(int rows, int cols);
inline constexpr int kGgufWidenScratchSlot = 6;  // thread_scratch slot of the widened rows

}  // namespace moeserve::kernels::cpu::detail
