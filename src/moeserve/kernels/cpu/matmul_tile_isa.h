// Internal: the per-ISA implementations behind detail::matmul_tile and
// detail::matmul_tile_int8 (matmul_tile.h, linear_int8.h), which dispatch.cpp
// picks from by active_isa(). Plain types only: each *_avx2.cpp / *_avx512.cpp
// keeps its intrinsics to itself (nothing compiled with different -m flags is
// shared through a header, so no inline function can be merged across ISAs).
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu::detail {

// A per-thread scratch buffer of at least `bytes` bytes, 64-byte aligned,
// reused across calls (dispatch.cpp). The AVX-512 files use it instead of
// std::vector: a std template instantiated in a file built with -mavx512* may
// be the copy the linker keeps for the whole program, and would then run
// AVX-512 code on an AVX2-only CPU. So those files call no inline std code at
// all. Slots 0..7 (0-1 the bf16 tile, 2 int8, 3 int4 panels or reordered rows, 4 flash attention (paged and MLA: never
// live at once), 5 the GGUF pair kernels' prepared row, 6 FP8 rows widened to f32, 7 a packed GGUF row unpacked): one
// kernel per slot, so no two users of a slot are ever live on one thread.
void* thread_scratch(int slot, int64_t bytes);

// Scalar (dispatch.cpp), AVX2 (matmul_tile_avx2.cpp) and AVX-512 BF16
// (matmul_tile_avx512.cpp).
void matmul_tile_ref(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                     int64_t ldo);
void matmul_tile_ref(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* out,
                     int64_t ldo);
void matmul_tile_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                      int64_t ldo, float* pack);
void matmul_tile_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* out,
                      int64_t ldo, float* pack);
int64_t matmul_pack_floats_avx2();
// The run-time choices of the avx512 bf16 tile (isa.h): round_x = bf16_round_activations() (the
// GEMM rounds x to bf16 once instead of keeping f32), gemv_row_blocks = gemv_row_blocks().
struct Avx512Bf16Options {
    bool round_x = false;
    bool gemv_row_blocks = false;
};
void matmul_tile_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                        int64_t ldo, float* pack, Avx512Bf16Options options);
int64_t matmul_pack_floats_avx512();
// The avx512 f32 GEMM (f32 FMA, the bf16 GEMM's default) over int4 weights: out[i * ldo + j] =
// sum_p x[i * ldx + p] * W[j, p], W[j, p] = scale[j, g] * (code[j, p] - zero[j, g]) (one
// rounding, as dequantize_int4_row), g = p / group_size; codes [n, k / 2] two per byte, low nibble
// first; scale, zero [n, k / group_size]. k and group_size multiples of 16. pack: at least
// matmul_pack_floats_avx512() floats.
void gemm_int4_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, const uint8_t* codes, const float* scale,
                      const float* zero, int64_t group_size, int64_t n, float* out, int64_t ldo, float* pack);
// matmul_tile.h's round_rows_bf16 / matmul_tile_rounded at the avx512 level.
void round_rows_bf16_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* xb);
void matmul_tile_rounded_avx512(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                                int64_t ldo, float* pack);

// int8: scalar, AVX2 (linear_int8_avx2.cpp), AVX-512 VNNI
// (linear_int8_avx512.cpp).
void matmul_tile_int8_ref(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                          const float* sw, int64_t n, float* out, int64_t ldo);
void matmul_tile_int8_avx2(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                           const float* sw, int64_t n, float* out, int64_t ldo);
// The AVX2 int16 path (both operands widened, vpmaddwd) for any m: exact for activations of -128,
// which the sign-trick tile is not (linear_int8_static).
void matmul_tile_int8_avx2_int16(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                                 const float* sw, int64_t n, float* out, int64_t ldo);
// gemv_row_blocks: isa.h gemv_row_blocks(), the weight walk of the decode rows (m <= 2).
void matmul_tile_int8_avx512(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                             const float* sw, int64_t n, float* out, int64_t ldo, bool gemv_row_blocks);

}  // namespace moeserve::kernels::cpu::detail
