// GGUF weights repacked at load for the few activation rows of decode (#27): groups of
// kGgufPackRows rows whose blocks are interleaved, so that one pass over a block column gives
// the integer sums of all 8 rows in one vector, with their 8 scales in one load. Row by row, each
// dot product ends in a horizontal sum and applies its scales one block at a time in scalar code;
// in a group those costs are shared by 8 rows (llama.cpp's CPU backend repacks Q4_0 / Q4_K / Q6_K
// the same way on AVX2, as 8 interleaved rows).
//
// The packed kernels give the scalar reference's bits (gguf_vec_dot_ref): per block the exact
// integer sum, then the reference's f32 operations in each row's own lane, block after block. So
// a token's result does not depend on its batch, and a packed matrix equals its rows as stored.
//
// Layout: group g holds rows 8 g .. 8 g + 7 (rows past the matrix are zero blocks) as nb packed
// blocks of 8 * type_size bytes, one per block column. A packed block is the 8 rows' blocks cut
// into segments (gguf_packed.cpp has each type's): a scale segment is gathered, rows 0-7 one
// after another in units of 2 or 4 bytes (unit u of every row, then unit u + 1), so 8 f16 scales
// are one load; a quant segment is interleaved by row pairs (p, p + 4), p = 0-3, in 16-byte
// chunks [row p chunk k | row p + 4 chunk k], so one 256-bit register holds the same 16 elements
// of two rows against one broadcast activation chunk, and three vphaddd give rows 0-7 in order.
// Depends on core only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moeserve/core/ggml_type.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/weight_types.h"

namespace moeserve::kernels::cpu {

// True when `type` has a packed layout (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) and packing is on
// (isa.h's gguf_packed_rows: the avx2 and avx512 levels by default).
bool gguf_packs(GgmlType type);
// True when `type` has a packed layout, whatever the switch says.
bool gguf_has_packed_layout(GgmlType type);

// Bytes of [rows, cols] of `type` packed: ceil(rows / 8) groups (checked: a packed layout).
size_t gguf_packed_bytes(GgmlType type, int64_t rows, int64_t cols);

// m's rows (any row_stride: a tensor-parallel rectangle too) packed into dst, which must hold
// gguf_packed_bytes(m.type, m.rows, m.cols) bytes. Returns the matrix over dst: packed_rows =
// kGgufPackRows, row_stride = the bytes of one group. The groups are shared out among the pool's
// threads.
GgufMatrix gguf_pack(ThreadPool& pool, const GgufMatrix& m, uint8_t* dst);

// Row r of a matrix as its stored blocks (cols / block_size blocks into dst), packed or not.
void gguf_unpack_row(const GgufMatrix& m, int64_t r, uint8_t* dst);

}  // namespace moeserve::kernels::cpu
