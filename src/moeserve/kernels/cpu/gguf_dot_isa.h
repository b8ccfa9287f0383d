// Internal: the per-ISA GGUF dot products behind gguf_vec_dot (gguf_dot.h), picked in
// dispatch.cpp. Plain types only, as matmul_tile_isa.h explains. nb = number of weight blocks.
#pragma once

#include <cstdint>

#include "moeserve/kernels/cpu/gguf_dot.h"

namespace moeserve::kernels::cpu::detail {

float vec_dot_q4_0_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q4_1_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q5_0_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q5_1_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q8_0_q8_0_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q4_k_q8_k_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q5_k_q8_k_avx2(int64_t nb, const void* w, const void* a);
float vec_dot_q6_k_q8_k_avx2(int64_t nb, const void* w, const void* a);

// AVX-512 VNNI: the tile kernel of `type` for rows x cols (1..4 each), null for a type without
// one; the pair kernels are its 1 x 1 tiles.
GgufTileFn gguf_tile_avx512(GgmlType type, int rows, int cols);
float vec_dot_q4_0_q8_0_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q5_0_q8_0_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q8_0_q8_0_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q2_k_q8_k_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q3_k_q8_k_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q4_k_q8_k_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q5_k_q8_k_avx512(int64_t nb, const void* w, const void* a);
float vec_dot_q6_k_q8_k_avx512(int64_t nb, const void* w, const void* a);

}  // namespace moeserve::kernels::cpu::detail
