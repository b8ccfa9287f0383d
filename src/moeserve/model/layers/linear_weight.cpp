#include "moeserve/model/layers/linear_weight.h"

#include <cstring>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/core/overloaded.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/gguf_weights.h"

namespace moeserve::model {

namespace {

// Rows [row_begin, +rows) x columns [col_begin, +cols) of a row-major [.., full_cols] matrix,
// copied.
Tensor copy_rectangle(const void* full, DType dtype, int64_t full_cols, const LinearShard& s, int64_t rows,
                      int64_t cols) {
    const size_t es = dtype_size(dtype);
    Tensor out(dtype, {rows, cols});
    const auto* src = static_cast<const char*>(full);
    auto* dst = static_cast<char*>(out.data());
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(dst + static_cast<size_t>(r * cols) * es,
                    src + static_cast<size_t>((s.row_begin + r) * full_cols + s.col_begin) * es,
                    static_cast<size_t>(cols) * es);
    }
    return out;
}

// Entries [begin, begin + n) of a 1-D tensor, or empty for an empty one.
Tensor slice_vector(const Tensor& v, int64_t begin, int64_t n) {
    if (v.empty()) return {};
    Tensor out(v.dtype(), {n});
    const size_t es = dtype_size(v.dtype());
    std::memcpy(out.data(), static_cast<const char*>(v.data()) + static_cast<size_t>(begin) * es,
                static_cast<size_t>(n) * es);
    return out;
}

FloatWeight float_rectangle(const FloatWeight& full, const LinearShard& s, int64_t rows, int64_t cols) {
    const int64_t in = full.view.dim(1);
    FloatWeight w;
    if (cols == in && full.owned.empty()) {  // a row slice of a mapped weight: a view
        const size_t es = dtype_size(full.view.dtype);
        w.view = TensorView{static_cast<char*>(full.view.data) + static_cast<size_t>(s.row_begin * in) * es,
                            full.view.dtype, Shape{rows, in}};
        return w;
    }
    w.owned = copy_rectangle(full.view.data, full.view.dtype, in, s, rows, cols);
    w.view = w.owned.view();
    return w;
}

}  // namespace

int64_t weight_rows(const LinearWeight& w) {
    return std::visit(Overloaded{[](const FloatWeight& f) { return f.view.dim(0); },
                                 [](const DynamicInt8Weight& q) { return q.data.dim(0); },
                                 [](const StaticInt8Weight& q) { return q.data.dim(0); },
                                 [](const BlockWeight& b) { return b.matrix.rows; },
                                 [](const Int4Weight& q) { return q.matrix.rows(); }},
                      w);
}

int64_t weight_cols(const LinearWeight& w) {
    return std::visit(Overloaded{[](const FloatWeight& f) { return f.view.dim(1); },
                                 [](const DynamicInt8Weight& q) { return q.data.dim(1); },
                                 [](const StaticInt8Weight& q) { return q.data.dim(1); },
                                 [](const BlockWeight& b) { return b.matrix.cols; },
                                 [](const Int4Weight& q) { return q.matrix.in_cols(); }},
                      w);
}

size_t weight_nbytes(const LinearWeight& w) {
    return std::visit(
        Overloaded{
            [](const FloatWeight& f) { return f.packed.empty() ? f.view.nbytes() : f.packed.nbytes(); },
            [](const DynamicInt8Weight& q) { return q.data.nbytes() + q.scale.nbytes(); },
            [](const StaticInt8Weight& q) { return q.data.nbytes() + q.deq_scale.nbytes() + q.quant_bias.nbytes(); },
            [](const BlockWeight& b) { return gguf_matrix_bytes(b.matrix); },
            [](const Int4Weight& q) { return q.matrix.nbytes(); }},
        w);
}

LinearWeight weight_rectangle(const LinearWeight& full, const LinearShard& s, const std::string& name) {
    const int64_t rows = s.rows < 0 ? weight_rows(full) : s.rows;
    const int64_t cols = s.cols < 0 ? weight_cols(full) : s.cols;
    const int64_t in = weight_cols(full);
    return std::visit(
        Overloaded{[&](const FloatWeight& f) -> LinearWeight {
                       MOESERVE_CHECK(f.packed.empty(), "{}: bf16 weights are repacked per shard at load, not cut",
                                      name);
                       return float_rectangle(f, s, rows, cols);
                   },
                   [&](const DynamicInt8Weight& q) -> LinearWeight {
                       return DynamicInt8Weight{copy_rectangle(q.data.data(), DType::kI8, in, s, rows, cols),
                                                slice_vector(q.scale, s.row_begin, rows)};
                   },
                   [&](const StaticInt8Weight& q) -> LinearWeight {
                       StaticInt8Weight out;
                       out.data = copy_rectangle(q.data.data(), DType::kI8, in, s, rows, cols);
                       out.deq_scale = slice_vector(q.deq_scale, s.row_begin, rows);
                       if (s.adds_constants()) out.quant_bias = slice_vector(q.quant_bias, s.row_begin, rows);
                       out.x_mul = q.x_mul;
                       out.x_zero = q.x_zero;
                       out.x_div = slice_vector(q.x_div, s.col_begin, cols);  // golden-stick: this rank's input columns
                       return out;
                   },
                   [&](const BlockWeight& b) -> LinearWeight {
                       MOESERVE_CHECK(b.owned.empty(), "{}: FP8 blocks are packed per shard at load, not cut", name);
                       return BlockWeight{gguf_rectangle(b.matrix, s.row_begin, rows, s.col_begin, cols, name), {}};
                   },
                   [&](const Int4Weight&) -> LinearWeight {
                       raise(ErrorCode::kInternal, "{}: an int4 rectangle is read from the checkpoint", name);
                   }},
        full);
}

void run_linear(ThreadPool& pool, const LinearWeight& w, const float* x, int64_t rows, float* out) {
    const int64_t n = weight_rows(w), k = weight_cols(w);
    std::visit(Overloaded{[&](const FloatWeight& f) {
                              if (!f.packed.empty()) {
                                  kernels::ops().linear_bf16_packed(pool, x, rows, k, f.packed.as<const uint16_t>(), n,
                                                                    out);
                              } else if (f.view.dtype == DType::kBF16) {
                                  kernels::ops().linear_bf16(pool, x, rows, k, f.view.as<const uint16_t>(), n, out);
                              } else {
                                  kernels::ops().linear_f32(pool, x, rows, k, f.view.as<const float>(), n, out);
                              }
                          },
                          [&](const DynamicInt8Weight& q) {
                              kernels::ops().linear_int8(pool, x, rows, k, q.data.as<const int8_t>(),
                                                         q.scale.as<const float>(), n, out);
                          },
                          [&](const StaticInt8Weight& q) {
                              const kernels::StaticInt8Weights v{
                                  q.data.as<const int8_t>(),
                                  q.quant_bias.empty() ? nullptr : q.quant_bias.as<const int32_t>(),
                                  q.deq_scale.as<const float>(),
                                  n,
                                  k,
                                  q.x_mul,
                                  q.x_zero,
                                  q.x_div.empty() ? nullptr : q.x_div.as<const float>()};
                              kernels::ops().linear_int8_static(pool, x, rows, v, out);
                          },
                          [&](const BlockWeight& b) { kernels::ops().gguf_linear(pool, x, rows, b.matrix, out); },
                          [&](const Int4Weight& q) {
                              if (q.matrix.perm.empty()) {
                                  kernels::ops().linear_int4(pool, x, rows, q.view(), out);
                                  return;
                              }
                              // GPTQ act order: x's columns in the stored order first, into a
                              // buffer kept per thread and grown to the largest call, not
                              // allocated on every layer of every step
                              thread_local std::vector<float> xp;
                              if (xp.size() < static_cast<size_t>(rows * q.matrix.cols())) {
                                  xp.resize(static_cast<size_t>(rows * q.matrix.cols()));
                              }
                              gather_columns(q.matrix, x, rows, xp.data());
                              kernels::ops().linear_int4(pool, xp.data(), rows, q.view(), out);
                          }},
               w);
}

}  // namespace moeserve::model
