#include "moeserve/model/formats/gguf_weights.h"

#include "moeserve/core/error.h"
#include "moeserve/core/load_pool.h"
#include "moeserve/kernels/ops.h"

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
    MOESERVE_CHECK(m.packed_rows == 1, "{}: a packed matrix is not cut", name);
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
    if (m.packed_rows != 1) {
        return static_cast<size_t>((m.rows + m.packed_rows - 1) / m.packed_rows) * m.row_stride;
    }
    const GgmlTypeTraits t = ggml_traits(m.type);
    return static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols / t.block_size) * t.type_size;
}

Tensor gguf_pack_for_kernels(const io::WeightSource& weights, const std::vector<kernels::GgufMatrix*>& matrices,
                             const std::vector<std::string>& names) {
    const kernels::Ops& ops = kernels::ops();
    size_t total = 0;
    for (const kernels::GgufMatrix* m : matrices) total += ops.gguf_packed_bytes(*m);
    if (total == 0) return {};
    Tensor owned(DType::kU8, {static_cast<int64_t>(total)});
    uint8_t* at = owned.as<uint8_t>();
    for (kernels::GgufMatrix* m : matrices) {
        const size_t bytes = ops.gguf_packed_bytes(*m);
        if (bytes == 0) continue;
        *m = ops.gguf_pack(load_pool(), *m, at);
        at += bytes;
    }
    for (const std::string& name : names) weights.drop_resident(name);  // the packed rows are what the layer reads now
    return owned;
}

Tensor gguf_pack_experts(const io::WeightSource& weights, kernels::GgufExperts& experts,
                         const std::vector<std::string>& names) {
    std::vector<kernels::GgufMatrix*> matrices;
    for (auto* v : {&experts.gate, &experts.up, &experts.down}) {
        for (kernels::GgufMatrix& m : *v) matrices.push_back(&m);
    }
    return gguf_pack_for_kernels(weights, matrices, names);
}

size_t gguf_experts_bytes(const kernels::GgufExperts& experts) {
    size_t bytes = 0;
    for (const auto* v : {&experts.gate, &experts.up, &experts.down}) {
        for (const kernels::GgufMatrix& m : *v) bytes += gguf_matrix_bytes(m);
    }
    return bytes;
}

}  // namespace moeserve::model
