#include "moeserve/model/formats/gguf_weights.h"

#include "moeserve/core/error.h"

namespace moeserve::model {

std::optional<kernels::GgufMatrix> gguf_matrix(const io::WeightSource& weights, const std::string& name, int64_t rows,
                                               int64_t cols, bool all_types) {
    if (!weights.is_gguf()) return std::nullopt;
    const std::optional<io::GgufBlocks> b = weights.gguf(name);
    if (!all_types && (b->type == GgmlType::kF32 || b->type == GgmlType::kBF16)) return std::nullopt;
    if (!(b->shape == Shape{rows, cols})) {
        raise(ErrorCode::kInvalidModel, "tensor {} has shape {}, but the model's metadata implies {}",
              weights.describe(name), b->shape.str(), Shape{rows, cols}.str());
    }
    const GgmlTypeTraits t = ggml_traits(b->type);
    kernels::GgufMatrix m{b->type, b->bytes.data(), rows, cols, static_cast<size_t>(cols / t.block_size) * t.type_size};
    return m;
}

kernels::GgufMatrix gguf_rectangle(const kernels::GgufMatrix& m, int64_t row_begin, int64_t rows, int64_t col_begin,
                                   int64_t cols, const std::string& name) {
    MOESERVE_CHECK(row_begin >= 0 && row_begin + rows <= m.rows && col_begin >= 0 && col_begin + cols <= m.cols,
                   "rectangle rows [{}, +{}) cols [{}, +{}) of [{}, {}]", row_begin, rows, col_begin, cols, m.rows,
                   m.cols);
    const GgmlTypeTraits t = ggml_traits(m.type);
    if (col_begin % t.block_size != 0 || cols % t.block_size != 0) {
        raise(ErrorCode::kUnsupported,
              "tensor '{}' is {} (blocks of {} columns); this tensor-parallel split takes columns [{}, {}), which "
              "cut a block; use a tensor-parallel size that divides it into whole blocks",
              name, t.name, t.block_size, col_begin, col_begin + cols);
    }
    kernels::GgufMatrix r = m;
    r.data = m.row(row_begin) + static_cast<size_t>(col_begin / t.block_size) * t.type_size;
    r.rows = rows;
    r.cols = cols;
    return r;
}

size_t gguf_matrix_bytes(const kernels::GgufMatrix& m) {
    const GgmlTypeTraits t = ggml_traits(m.type);
    return static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols / t.block_size) * t.type_size;
}

}  // namespace moeserve::model
