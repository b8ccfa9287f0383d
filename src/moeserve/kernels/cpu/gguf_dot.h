// Dot products of GGUF weight rows, kept as their stored blocks, with activations quantized per
// block the way llama.cpp's CPU backend does: Q8_0 for the 32-element types, Q8_K for the
// K-quants (quantize_gguf makes both). The products are integer (exact int32 per block); the
// block scales are applied in f32. Supported weight types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4
// (gpt-oss's experts: the doubled e2m1 values are small integers, so q8_0 as llama.cpp), Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K (llama-quantize writes Q5_0 / Q5_1 / Q8_0 where a row is too short for a K-quant:
// the bench model's 384-wide expert down projections in Q4_K_M / Q5_K_M files). Q4_1 / Q5_1
// (y = d q + m) take q8_0 activations and sum them in the kernel, where llama.cpp stores that
// sum, rounded to f16, in its q8_1 blocks.
// moeserve's own FP8 rows (kF8E4M3x128, DeepSeek's block-scaled weights) pair with f32
// activations instead (W8A16): the weights are widened in registers and the sum is in f32 lanes.
// Depends on core only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moeserve/core/ggml_type.h"

namespace moeserve::kernels::cpu {

// True for the weight types above.
bool gguf_dot_supported(GgmlType weight);
// The activation type llama.cpp pairs with `weight`: kQ8_0 or kQ8_K; kF32 for kF8E4M3x128
// (checked: supported types).
GgmlType gguf_dot_activation_type(GgmlType weight);
// x f32 [n] -> `act` blocks at dst, as quantize_gguf (gguf_quantize.h) makes them, bit for bit:
// the activation types (kQ8_0, kQ8_K) vectorized above the ref level, any other type by
// quantize_gguf itself. Finite inputs only. Single-threaded.
void quantize_gguf_activations(GgmlType act, const float* x, void* dst, int64_t n);

// sum_i w_i * a_i over n elements. w: n / block_size blocks of `type` (one weight row, any
// address); a: the same n elements quantized to gguf_dot_activation_type(type) (Q8_K blocks
// 4-byte aligned). n a multiple of the block size (checked). Runs the level active_isa() picks:
// ref is gguf_vec_dot_ref; avx2 the AVX2 code (the reference for Q2_K / Q3_K); avx512 and amx
// the AVX-512 VNNI code for all but Q4_1 / Q5_1 (AVX2 there). AVX2's K-quants give the reference's bits
// exactly (per-block integer sums, then the same f32 operations); everything else accumulates in
// f32 lanes, so it differs from the reference by float rounding only.
// Single-threaded.
float gguf_vec_dot(GgmlType type, int64_t n, const void* w, const void* a);
// The kernel gguf_vec_dot runs for `type` at the active ISA level, taking the number of weight
// blocks: a product over many rows resolves it once, not per row (the per-row type and ISA
// dispatch was 12% of a Q4_0 decode step's instructions, the rows being 4-32 blocks long).
// Checked: a supported type.
using GgufDotKernel = float (*)(int64_t nb, const void* w, const void* a);
GgufDotKernel gguf_dot_kernel(GgmlType type);

// Tiles: rows (1..kGgufTileRows) weight rows, w + r * w_stride, times cols (1..kGgufTileCols)
// activation rows a[c], nb blocks each: out[c * ldo + r] = the gguf_dot_kernel product of that
// pair, with its bits (a token's result does not depend on the tile it was computed in). Where
// the active ISA level has tile kernels for the type (AVX-512: all, Q4_1 / Q5_1 AVX2's; AVX2:
// all, for two or more activation rows) a weight block is unpacked once for the whole tile;
// elsewhere (the reference, AVX2's one activation row) the tile is a loop over the pair kernel.
inline constexpr int kGgufTileRows = 4;
inline constexpr int kGgufTileCols = 4;
inline constexpr int kGgufPackRows = 8;  // the rows of a packed group (gguf_packed.h)
using GgufTileFn = void (*)(int64_t nb, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out,
                            int64_t ldo);
using GgufPrepareFn = void (*)(const void* quantized_row, int64_t nb, void* dst);
// One group of a packed matrix (gguf_packed.h): 8 weight rows, `rows` (1-8) of them stored to out.
using GgufPackedTileFn = void (*)(int64_t nb, int rows, const uint8_t* group, const uint8_t* const* a, float* out,
                                  int64_t ldo);
// A type's kernels at the active ISA level, resolved once for a whole product. Some tiles take
// their activation rows prepared: where prepared_row_bytes(nb) is not 0, the caller runs
// prepare() on each quantized row (gguf_dot_activation_type) into that many bytes and passes
// those rows to run().
// A packed matrix (packed_rows kGgufPackRows) has tiles of row_step() = 8 rows at every ISA
// level (the reference's unpacks each row): run() takes w as the group that starts at the tile's
// first row (GgufMatrix::rows_from) and ignores w_stride.
class GgufTiles {
public:
    explicit GgufTiles(GgmlType type, int packed_rows = 1);
    int row_step() const { return packed_[0] != nullptr ? kGgufPackRows : kGgufTileRows; }
    size_t prepared_row_bytes(int64_t nb) const;
    void prepare(const void* quantized_row, int64_t nb, void* dst) const { prepare_(quantized_row, nb, dst); }
    void run(int64_t nb, int rows, int cols, const uint8_t* w, size_t w_stride, const uint8_t* const* a, float* out,
             int64_t ldo) const {
        if (packed_[0] != nullptr) {
            packed_[cols - 1](nb, rows, w, a, out, ldo);
            return;
        }
        if (const GgufTileFn fn = tiles_[rows - 1][cols - 1]) {
            fn(nb, w, w_stride, a, out, ldo);
            return;
        }
        for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < cols; ++c) out[c * ldo + r] = dot_(nb, w + static_cast<size_t>(r) * w_stride, a[c]);
        }
    }

    // Weight rows widened once for many activation rows (FP8 at the avx2 / avx512 levels): where
    // widens(), widen() writes `rows` weight rows as f32 [rows, nb * block] (dst from
    // widen_buffer: this thread's, valid until its next call) and run_widened() over them gives
    // run()'s bits without converting the weights again for each group of kGgufTileCols
    // activation rows.
    bool widens() const { return widen_ != nullptr; }
    float* widen_buffer(int64_t floats) const;
    void widen(int64_t nb, int rows, const uint8_t* w, size_t w_stride, float* dst) const {
        widen_(nb, rows, w, w_stride, dst);
    }
    void run_widened(int64_t nb, int rows, int cols, const float* w, int64_t row_floats, const uint8_t* const* a,
                     float* out, int64_t ldo) const {
        widened_[rows - 1][cols - 1](nb, reinterpret_cast<const uint8_t*>(w), static_cast<size_t>(row_floats) * 4, a,
                                     out, ldo);
    }

private:
    using WidenFn = void (*)(int64_t nb, int rows, const uint8_t* w, size_t w_stride, float* dst);
    GgufDotKernel dot_;
    GgufPrepareFn prepare_ = nullptr;
    WidenFn widen_ = nullptr;
    GgufTileFn tiles_[kGgufTileRows][kGgufTileCols] = {};
    GgufTileFn widened_[kGgufTileRows][kGgufTileCols] = {};
    GgufPackedTileFn packed_[kGgufTileCols] = {};
    size_t prepared_block_bytes_ = 0;  // packed: the prepared activation block's bytes (0: none)
};

// Scalar reference: per block the exact integer dot product, then
// sum += (d_w * d_a) * isum (K-quants with a min: sum -= (dmin_w * d_a) * isum_min).
float gguf_vec_dot_ref(GgmlType type, int64_t n, const void* w, const void* a);

// out[r] = gguf_vec_dot(type, n, row r, a) for `rows` rows of w stored one after another.
void gguf_matvec(GgmlType type, int64_t rows, int64_t n, const void* w, const void* a, float* out);

}  // namespace moeserve::kernels::cpu
