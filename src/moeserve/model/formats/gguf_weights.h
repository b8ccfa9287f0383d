// The layers' side of GGUF weights: a checkpoint tensor of a GGUF source as a matrix of stored
// blocks (kernels/weight_types.h GgufMatrix) and its tensor-parallel rectangles. Linear, Experts and the
// decoder's embedding ask here first; a nullopt answer sends them down their usual paths.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/weight_types.h"

namespace moeserve::model {

// The blocks of `name` as a [rows, cols] matrix when `weights` is a GGUF source and the layer
// should run on them: every type but F32 and BF16 (those stay zero-copy views on the float
// paths), or every type when `all_types`. nullopt for a safetensors source. Throws kInvalidModel
// naming the tensor when its shape is not [rows, cols], kUnsupported for a type moeserve cannot
// compute with.
std::optional<kernels::GgufMatrix> gguf_matrix(const io::WeightSource& weights, const std::string& name, int64_t rows,
                                               int64_t cols, bool all_types = false);

// The rectangle [row_begin, +rows) x [col_begin, +cols) of m, zero-copy. Columns must start and
// end on the type's block boundaries (kUnsupported naming `name` otherwise: a TP degree that cuts
// a block).
kernels::GgufMatrix gguf_rectangle(const kernels::GgufMatrix& m, int64_t row_begin, int64_t rows, int64_t col_begin,
                                   int64_t cols, const std::string& name);

// Bytes of the matrix's blocks (rows x whole blocks of cols).
size_t gguf_matrix_bytes(const kernels::GgufMatrix& m);

// The matrices that the active backend repacks for its kernels (kernels::Ops::gguf_pack: 8
// interleaved rows at the avx2 and avx512 levels), packed into one owned buffer; the others are left in the
// mapping. Returns the buffer (empty when nothing was packed). The mapped pages of every tensor
// in `names` are then dropped from this process's resident memory, so a packed model holds about
// its file's size, not twice it.
Tensor gguf_pack_for_kernels(const io::WeightSource& weights, const std::vector<kernels::GgufMatrix*>& matrices,
                             const std::vector<std::string>& names);
// gguf_pack_for_kernels over every gate, up and down matrix of the experts.
Tensor gguf_pack_experts(const io::WeightSource& weights, kernels::GgufExperts& experts,
                         const std::vector<std::string>& names);
// Bytes of the experts' matrices (gguf_matrix_bytes summed), packed or not.
size_t gguf_experts_bytes(const kernels::GgufExperts& experts);

}  // namespace moeserve::model
