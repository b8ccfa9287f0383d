// The one in-memory form of int4 weights (kernels/weight_types.h Int4Weights: 4-bit codes two per byte,
// f32 scale and zero per row and group) and how each int4 checkpoint layout maps onto it:
//   compressed-tensors pack-quantized: PREFIX.weight_packed I32 [out, ceil(in / 8)] (column 8i + k
//     in bits 4k..4k+3 of word i, stored as q + 8), weight_scale [out, groups], weight_zero_point
//     I32 [ceil(out / 8), groups] packed the same way along the rows (asymmetric only),
//     weight_shape [2] (optional here): w = scale * (q - zero_point).
//   AutoAWQ gemm: PREFIX.qweight I32 [in, out / 8] (output column 8j + c in nibble
//     {0, 4, 1, 5, 2, 6, 3, 7}[c] of word j), qzeros I32 [groups, out / 8] (the same order),
//     scales [groups, out]: w = scale * (q - z).
//   GPTQ: PREFIX.qweight I32 [in / 8, out] (input row 8i + k in nibble k), qzeros I32
//     [groups, out / 8] (nibble k: column 8j + k), scales [groups, out], g_idx [in]:
//     w = scale * (q - (z + 1)) for checkpoint_format gptq (v1), scale * (q - z) for gptq_v2.
//     With desc_act, g_idx is an activation order: the columns are stored sorted by group and
//     `perm` says which input column each one multiplies (the activations are gathered to match).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/weight_types.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model {

struct Int4Matrix {
    Tensor codes;            // U8 [rows, cols / 2]: column 2i in the low nibble of byte i
    Tensor scale;            // F32 [rows, groups]
    Tensor zero;             // F32 [rows, groups]
    int64_t group_size = 0;  // columns per group (the last may be partial)
    Tensor perm;             // I32 [cols] or empty: stored column i multiplies input column perm[i] (GPTQ desc_act),
                             // none where perm[i] < 0 (a padding column of act_order_columns)
    int64_t input_cols = 0;  // the columns of x when they differ from cols() (act_order_columns); 0: cols()

    int64_t rows() const { return codes.dim(0); }
    int64_t cols() const { return codes.dim(1) * 2; }
    int64_t in_cols() const { return input_cols > 0 ? input_cols : cols(); }
    // The 4-bit code of row j, stored column p.
    int code(int64_t j, int64_t p) const {
        return (codes.as<const uint8_t>()[j * (cols() / 2) + p / 2] >> (4 * (p & 1))) & 15;
    }
    kernels::Int4Weights view() const {
        return {codes.as<const uint8_t>(), scale.as<const float>(), zero.as<const float>(), rows(), cols(), group_size};
    }
    size_t nbytes() const { return codes.nbytes() + scale.nbytes() + zero.nbytes() + perm.nbytes(); }
};

// An int4 matrix [rows, cols] in groups of group_size, codes zero (scales and zeros unset).
Int4Matrix empty_int4_matrix(int64_t rows, int64_t cols, int64_t group_size);

// The float tensor `name` (BF16, F16 or F32, of the given shape) as f32; Error kInvalidModel
// naming it and `what` it is otherwise.
Tensor int4_float_param(const io::WeightSource& weights, const std::string& name, const Shape& shape, const char* what);

// Whether the weight of module `prefix` is stored as int4 (quant is an int4 checkpoint and
// PREFIX.weight_packed / PREFIX.qweight exists, or a ModelSlim checkpoint that describes it as
// W4A8_DYNAMIC: modelslim_w4a8.h).
bool stored_as_int4(const io::WeightSource& weights, const std::string& prefix, const Quantization& quant);

// PREFIX's weight [rows, cols] as int4: read in its layout when stored_as_int4, else the weight
// dequantized to f32 (load_dequantized_f32) and quantized with quant.int4_config's group size.
// Errors kInvalidModel name the tensor (wrong dtype or shape, a missing scale or zero point, an
// odd column count); kUnsupported a GPTQ g_idx whose groups are not full (desc_act is read
// into `perm`).
Int4Matrix load_int4_matrix(const io::WeightSource& weights, const std::string& prefix, int64_t rows, int64_t cols,
                            const Quantization& quant);

// Quantizes f32 [rows, cols] (cols even) per row in groups of group_size columns (0: one group
// per row). Asymmetric: the range [min(w, 0), max(w, 0)] in 15 steps, zero = round(-lo / scale);
// symmetric: scale = absmax / 7, zero 8 (codes 1..15). scale_dtype BF16 / F16: each scale
// rounded to it before the codes are chosen (how checkpoints store them, so a written checkpoint
// reads back exactly). Round half to even; codes clamped to [0, 15].
Int4Matrix quantize_int4(const float* w, int64_t rows, int64_t cols, int64_t group_size, bool symmetric,
                         DType scale_dtype = DType::kF32);

// m as f32 [rows, in_cols] in input column order (the dequantize_int4_row op per row).
Tensor dequantize_int4(const Int4Matrix& m);

// out [rows, m.cols()] = x [rows, m.in_cols()] with its columns in m's stored order (m.perm set;
// 0 for a padding column).
void gather_columns(const Int4Matrix& m, const float* x, int64_t rows, float* out);

// Rows [row0, row0 + rows) and columns [col0, col0 + cols) of m. Columns must start on a group
// boundary and end on one (or at the row's end), unless m has one group per row: Error
// kUnsupported naming `name` otherwise (a tensor-parallel split inside a group). For an
// act-order matrix the columns are input columns: act_order_columns.
Int4Matrix int4_rectangle(const Int4Matrix& m, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                          const std::string& name);

// Rows [row0, +rows) of an act-order matrix m for the input columns [col0, +cols) only (a
// row-parallel TP slice: those inputs lie in every group). Each group keeps its stored columns
// whose input is in the slice, in order, padded to one width (the fewest of 32, 64 or a multiple
// of 128 columns that holds the fullest group; perm -1, so x is read as 0 there) so that the
// groups stay uniform for the kernels; groups with none are left out. Exact; the cost is the
// padding: up to cols() columns per row instead of `cols`.
Int4Matrix act_order_columns(const Int4Matrix& m, int64_t row0, int64_t rows, int64_t col0, int64_t cols);

// The stored columns [col0, +cols) of every row of m, with no act order (their inputs are
// m.perm[col0 + i], written to `inputs`, or col0 + i without one): a TP rank that computes those
// inputs itself in that order (the experts' intermediate features) then needs no gather. Group
// boundaries as int4_rectangle.
Int4Matrix int4_stored_columns(const Int4Matrix& m, int64_t col0, int64_t cols, const std::string& name,
                               std::vector<int32_t>& inputs);

// Rows `rows` of m, in that order (its act order kept).
Int4Matrix int4_rows(const Int4Matrix& m, const std::vector<int32_t>& rows);

// The rectangle [row0, +rows) x [col0, +cols) of PREFIX's weight [full_rows, full_cols] as int4:
// of the stored int4 matrix (int4_rectangle), or, quantizing at load, the f32 rectangle
// quantized on its own (so a tensor-parallel slice never splits a group).
Int4Matrix load_int4_rectangle(const io::WeightSource& weights, const std::string& prefix, int64_t full_rows,
                               int64_t full_cols, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                               const Quantization& quant);

// PREFIX's weight as f32 [rows, cols] however it is stored (int4 dequantized, else
// load_dequantized_f32 of PREFIX.weight).
Tensor load_weight_f32(const io::WeightSource& weights, const std::string& prefix, int64_t rows, int64_t cols,
                       const Quantization& quant);

}  // namespace moeserve::model
