// Internal: the kernels behind packed GGUF matrices (gguf_packed.h), picked by GgufTiles
// (dispatch.cpp). Plain types only, as matmul_tile_isa.h explains.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "moeserve/core/ggml_type.h"
#include "moeserve/kernels/cpu/gguf_packed.h"

namespace moeserve::kernels::cpu::detail {

// GgufPackedTileFn (gguf_dot.h): one group of 8 packed rows (rows of them valid, 1-8) times cols
// activation rows a[c], nb blocks each: out[c * ldo + r] = the reference dot product of row r and
// a[c], for r < rows.

// A q8_0 activation block as the packed AVX2 tiles of the 32-element types take it: the scale
// widened to f32 once, and the sum of the 32 values (for the unsigned weights' offset).
struct GgufPackedQ8Block {
    float d;
    int32_t sum;
    int8_t qs[32];
};
static_assert(sizeof(GgufPackedQ8Block) == 40);

// q8_0 row (nb blocks) -> nb GgufPackedQ8Blocks at dst.
void gguf_prepare_packed_q8(const void* quantized_row, int64_t nb, void* dst);

// The AVX-512 tiles' activation blocks: a 512-bit register of a packed block holds two 16-byte
// chunks of each of two rows ([row p chunk k | row p + 4 chunk k | row p chunk k + 1 | row p + 4
// chunk k + 1]), so each 32 activation bytes are stored as [0-15 | 0-15 | 16-31 | 16-31]: one
// load per register, no shuffle per block and activation row.
struct GgufPackedQ8x2Block {
    float d;
    int32_t sum;
    int8_t qs[64];
};
static_assert(sizeof(GgufPackedQ8x2Block) == 72);
// q8_K likewise (qs: 8 windows of 32 as above), with the bsums laid out for the tiles: bsums2 is
// [0-7 | 0-7 | 8-15 | 8-15] (Q6_K's offset, per 16-element sub-block), pair_bsums4 the 8 sums of
// bsums 2 j and 2 j + 1 four times (Q4_K / Q5_K's mins, per 32-element sub-block).
struct GgufPackedQ8Kx2Block {
    int8_t qs[512];
    int16_t bsums2[32];
    int16_t pair_bsums4[32];
    float d;
};
static_assert(sizeof(GgufPackedQ8Kx2Block) == 644);
// q8_0 row -> GgufPackedQ8x2Blocks; q8_K row -> GgufPackedQ8Kx2Blocks.
void gguf_prepare_packed_q8x2(const void* quantized_row, int64_t nb, void* dst);
void gguf_prepare_packed_q8kx2(const void* quantized_row, int64_t nb, void* dst);

// The AVX2 tile of a packed `type` for cols (1-4) activation rows: q8_0 rows prepared by
// gguf_prepare_packed_q8 for the 32-element types, q8_K rows as they are for Q4_K / Q5_K / Q6_K. Null for
// a type without a packed layout.
GgufPackedTileFn gguf_packed_tile_avx2(GgmlType type, int cols);
// The AVX-512 tile (VNNI), activation rows prepared by gguf_prepare_packed_q8x2 (the 32-element
// types) or gguf_prepare_packed_q8kx2 (Q4_K / Q5_K / Q6_K). Null for a type without a packed layout.
GgufPackedTileFn gguf_packed_tile_avx512(GgmlType type, int cols);
// The reference level's: each row unpacked (gguf_unpack_group_row), then gguf_vec_dot_ref.
GgufPackedTileFn gguf_packed_tile_ref(GgmlType type, int cols);

// pick(std::integral_constant<int, C>{}) for C = cols (1-4): a tile template's instance for it.
template <class Pick>
GgufPackedTileFn tile_for_cols(int cols, Pick pick) {
    switch (cols) {
        case 1:
            return pick(std::integral_constant<int, 1>{});
        case 2:
            return pick(std::integral_constant<int, 2>{});
        case 3:
            return pick(std::integral_constant<int, 3>{});
        default:
            return pick(std::integral_constant<int, 4>{});
    }
}

// Row r (0-7) of a packed group of nb blocks as its stored blocks, into dst.
void gguf_unpack_group_row(GgmlType type, int64_t nb, const uint8_t* group, int r, uint8_t* dst);

inline constexpr int kGgufPackedScratchSlot = 7;  // thread_scratch slot of the reference tile's unpacked row

}  // namespace moeserve::kernels::cpu::detail
