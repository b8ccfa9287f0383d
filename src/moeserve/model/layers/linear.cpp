#include "moeserve/model/layers/linear.h"

#include <cstring>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/linear.h"
#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/linear_int8_static.h"
#include "moeserve/model/formats/fp8_blocks.h"
#include "moeserve/model/formats/gguf_weights.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace {
// Rows [begin, begin + n) of an f32 vector (a bias), or empty for an empty one.
Tensor slice_rows(const Tensor& v, int64_t begin, int64_t n) {
    if (v.empty()) return {};
    Tensor out(DType::kF32, {n});
    std::memcpy(out.as<float>(), v.as<float>() + begin, static_cast<size_t>(n) * 4);
    return out;
}
}  // namespace

Linear Linear::load_fp8(const io::WeightSource& weights, const std::string& prefix, const Shape& shape,
                        const LinearShard& shard, bool has_bias, const Quantization& quant) {
    const int64_t rows = shard.rows < 0 ? shape[0] : shard.rows;
    const int64_t cols = shard.cols < 0 ? shape[1] : shard.cols;
    Linear l;
    l.owned_ = Tensor(DType::kU8, {static_cast<int64_t>(fp8_packed_bytes(rows, cols))});
    pack_fp8_rows(weights, prefix + ".weight", shape, shard.row_begin, rows, shard.col_begin, cols, quant,
                  l.owned_.as<uint8_t>());
    l.gguf_ = fp8_matrix(l.owned_.as<const uint8_t>(), rows, cols);
    quant.counts->fp8_linears += 1;
    if (has_bias) l.bias_ = slice_rows(load_vector_f32(weights, prefix + ".bias", shape[0]), shard.row_begin, rows);
    return l;
}

Linear Linear::load(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                    int64_t in_features, bool has_bias, const Quantization& quant, LayerPrecision precision) {
    Linear l;
    const std::string name = prefix + ".weight";
    if (const auto g = gguf_matrix(weights, name, out_features, in_features)) {
        l.gguf_ = *g;
        quant.counts->float_linears += 1;
        if (has_bias) l.bias_ = load_vector_f32(weights, prefix + ".bias", out_features);
        return l;
    }
    if (quant.fp8_module(prefix, precision) && fp8_packable(weights, name, quant, 0, in_features)) {
        return load_fp8(weights, prefix, {out_features, in_features}, {}, has_bias, quant);
    }
    const LinearScheme scheme = quant.scheme(prefix, precision);
    if (scheme == LinearScheme::kW4A16) {
        l.w4_ = load_int4_matrix(weights, prefix, out_features, in_features, quant);
        quant.counts->int4_linears += 1;
    } else if (stored_as_int4(weights, prefix, quant)) {
        l = dequantized_int4(weights, prefix, out_features, in_features, quant);
        quant.counts->float_linears += 1;
    }
    if (l.weight_.data != nullptr || l.is_int4()) {
        if (has_bias) l.bias_ = load_vector_f32(weights, prefix + ".bias", out_features);
        return l;
    }
    l.weight_ = get_checked(weights, name, Shape{out_features, in_features});
    if (scheme == LinearScheme::kW8A8Static) {
        StaticInt8Matrix m = load_static_int8(weights, prefix, out_features, in_features,
                                              quant.checkpoint == CheckpointQuant::kGoldenStick);
        l.static_ = true;
        l.w8_ = std::move(m.data);
        l.w8_scale_ = std::move(m.deq_scale);
        l.quant_bias_ = std::move(m.quant_bias);
        l.x_mul_ = m.x_mul;
        l.x_zero_ = m.input_offset;
        l.x_div_ = std::move(m.x_div);
        l.weight_ = TensorView{};
        quant.counts->static_linears += 1;
        // NOTE(#20): a float PREFIX.bias next to a static linear is already folded into quant_bias
        return l;
    }
    if (scheme == LinearScheme::kW8A8Dynamic) {
        Int8Matrix m = load_int8_matrix(weights, name, quant);
        l.int8_ = true;
        l.w8_ = std::move(m.data);
        l.w8_scale_ = std::move(m.scale);
        l.weight_ = TensorView{};
        quant.counts->dynamic_linears += 1;
    } else {
        quant.counts->float_linears += 1;
        switch (l.weight_.dtype) {
            case DType::kF32:
                break;
            case DType::kBF16:
                if (quant.f32_weights) {  // --dtype float32: widened once here
                    l.owned_ = weights.load_f32(name);
                    l.weight_ = l.owned_.view();
                }
                break;
            case DType::kF16:
            case DType::kI8:
                l.owned_ = load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
                l.weight_ = l.owned_.view();
                break;
            case DType::kF8E4M3: {
                if (quant.f32_weights) {
                    l.owned_ = load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
                    l.weight_ = l.owned_.view();
                    break;
                }
                // FP8 -> bf16 (exact when the block scales are powers of two, as UE8M0 scales are)
                const Tensor f = load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
                l.owned_ = Tensor(DType::kBF16, {out_features, in_features});
                for (int64_t i = 0; i < f.numel(); ++i) l.owned_.as<uint16_t>()[i] = f32_to_bf16(f.as<float>()[i]);
                l.weight_ = l.owned_.view();
                break;
            }
            default:
                raise(ErrorCode::kUnsupported,
                      "tensor '{}' has dtype {}; linear weights must be BF16, F16, F32, I8 or F8_E4M3", name,
                      dtype_name(l.weight_.dtype));
        }
    }
    if (has_bias) l.bias_ = load_vector_f32(weights, prefix + ".bias", out_features);
    return l;
}

Linear Linear::dequantized_int4(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                                int64_t in_features, const Quantization& quant) {
    // f32, not bf16: scale * (q - zero) needs up to 4 more mantissa bits than the scale has, so
    // bf16 would round it (MLA's kv_b_proj, absorbed into attention, must match its decode copy)
    Linear l;
    l.owned_ = load_weight_f32(weights, prefix, out_features, in_features, quant);
    l.weight_ = l.owned_.view();
    return l;
}

Linear Linear::load_shard(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                          int64_t in_features, const LinearShard& shard, bool has_bias, const Quantization& quant,
                          LayerPrecision precision) {
    const int64_t rows = shard.rows < 0 ? out_features : shard.rows;
    const int64_t cols = shard.cols < 0 ? in_features : shard.cols;
    MOESERVE_CHECK(shard.row_begin >= 0 && shard.row_begin + rows <= out_features && shard.col_begin >= 0 &&
                       shard.col_begin + cols <= in_features,
                   "shard rows [{}, +{}) cols [{}, +{}) outside [{}, {}]", shard.row_begin, rows, shard.col_begin, cols,
                   out_features, in_features);
    if (quant.fp8_module(prefix, precision)) {
        if (fp8_packable(weights, prefix + ".weight", quant, shard.col_begin, cols)) {
            return load_fp8(weights, prefix, {out_features, in_features}, shard, has_bias, quant);
        }
        Quantization widened = quant;  // the split cuts a 128-column block: this rank's part in bf16
        widened.fp8 = false;
        return load_shard(weights, prefix, out_features, in_features, shard, has_bias, widened, precision);
    }
    Linear full = load(weights, prefix, out_features, in_features, has_bias, quant, precision);
    if (rows == out_features && cols == in_features) return full;
    Linear l;
    if (full.is_gguf()) {
        l.gguf_ = gguf_rectangle(full.gguf_, shard.row_begin, rows, shard.col_begin, cols, prefix + ".weight");
        l.bias_ = slice_rows(full.bias_, shard.row_begin, rows);
        return l;
    }
    if (full.is_int4()) {
        l.w4_ = load_int4_rectangle(weights, prefix, out_features, in_features, shard.row_begin, rows, shard.col_begin,
                                    cols, quant);
        l.bias_ = slice_rows(full.bias_, shard.row_begin, rows);
        return l;
    }
    if (full.static_) {
        // rows: a slice of deq_scale and quant_bias; columns (row-parallel): the per-tensor
        // quantization is elementwise, so the partial sums add up; quant_bias is added once
        l.static_ = true;
        l.x_mul_ = full.x_mul_;
        l.x_zero_ = full.x_zero_;
        if (!full.x_div_.empty()) {  // golden-stick: the divisors of this rank's input columns
            l.x_div_ = Tensor(DType::kF32, {cols});
            std::memcpy(l.x_div_.as<float>(), full.x_div_.as<float>() + shard.col_begin, static_cast<size_t>(cols) * 4);
        }
        l.w8_ = Tensor(DType::kI8, {rows, cols});
        l.w8_scale_ = Tensor(DType::kF32, {rows});
        if (shard.adds_constants()) l.quant_bias_ = Tensor(DType::kI32, {rows});
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(l.w8_.as<int8_t>() + r * cols,
                        full.w8_.as<int8_t>() + (shard.row_begin + r) * in_features + shard.col_begin,
                        static_cast<size_t>(cols));
            l.w8_scale_.as<float>()[r] = full.w8_scale_.as<float>()[shard.row_begin + r];
            if (shard.adds_constants()) {
                l.quant_bias_.as<int32_t>()[r] = full.quant_bias_.as<int32_t>()[shard.row_begin + r];
            }
        }
        return l;
    }
    if (full.int8_) {
        // int8 rectangle; the per-row scales of the full rows stay valid for a column slice
        l.int8_ = true;
        l.w8_ = Tensor(DType::kI8, {rows, cols});
        l.w8_scale_ = Tensor(DType::kF32, {rows});
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(l.w8_.as<int8_t>() + r * cols,
                        full.w8_.as<int8_t>() + (shard.row_begin + r) * in_features + shard.col_begin,
                        static_cast<size_t>(cols));
            l.w8_scale_.as<float>()[r] = full.w8_scale_.as<float>()[shard.row_begin + r];
        }
        l.bias_ = slice_rows(full.bias_, shard.row_begin, rows);
        return l;
    }
    const size_t es = dtype_size(full.weight_.dtype);
    const auto* src = static_cast<const char*>(full.weight_.data);
    if (cols == in_features && full.owned_.empty()) {
        // 1. row slice of a mapped weight: a view
        l.weight_ = TensorView{const_cast<char*>(src) + static_cast<size_t>(shard.row_begin * in_features) * es,
                               full.weight_.dtype, Shape{rows, in_features}};
    } else {
        // 2. otherwise copy the rectangle [rows, cols]
        l.owned_ = Tensor(full.weight_.dtype, {rows, cols});
        auto* dst = static_cast<char*>(l.owned_.data());
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(dst + static_cast<size_t>(r * cols) * es,
                        src + static_cast<size_t>((shard.row_begin + r) * in_features + shard.col_begin) * es,
                        static_cast<size_t>(cols) * es);
        }
        l.weight_ = l.owned_.view();
    }
    l.bias_ = slice_rows(full.bias_, shard.row_begin, rows);
    return l;
}

size_t Linear::weight_bytes() const {
    if (is_gguf()) return gguf_matrix_bytes(gguf_);
    if (is_int4()) return w4_.nbytes();
    return int8_ || static_ ? w8_.nbytes() + w8_scale_.nbytes() + quant_bias_.nbytes() : weight_.nbytes();
}

void Linear::forward(ThreadPool& pool, const float* x, int64_t rows, float* out) const {
    const int64_t n = out_features();
    const int64_t k = in_features();
    if (is_gguf()) {
        kernels::cpu::GgufScratch scratch;
        kernels::cpu::gguf_linear(pool, x, rows, gguf_, out, scratch);
    } else if (is_int4() && w4_.perm.empty()) {
        kernels::cpu::linear_int4(pool, x, rows, w4_.view(), out);
    } else if (is_int4()) {  // GPTQ act order: x's columns in the stored order first
        std::vector<float> xp(static_cast<size_t>(rows * k));
        gather_columns(w4_, x, rows, xp.data());
        kernels::cpu::linear_int4(pool, xp.data(), rows, w4_.view(), out);
    } else if (static_) {
        kernels::cpu::Int8Scratch scratch;
        const kernels::cpu::StaticInt8Weights w{w8_.as<const int8_t>(),
                                                quant_bias_.empty() ? nullptr : quant_bias_.as<const int32_t>(),
                                                w8_scale_.as<const float>(),
                                                n,
                                                k,
                                                x_mul_,
                                                x_zero_,
                                                x_div_.empty() ? nullptr : x_div_.as<const float>()};
        kernels::cpu::linear_int8_static(pool, x, rows, w, out, scratch);
    } else if (int8_) {
        kernels::cpu::Int8Scratch scratch;
        kernels::cpu::linear_int8(pool, x, rows, k, w8_.as<const int8_t>(), w8_scale_.as<const float>(), n, out,
                                  scratch);
    } else if (weight_.dtype == DType::kBF16) {
        kernels::cpu::linear_bf16(pool, x, rows, k, weight_.as<const uint16_t>(), n, out);
    } else {
        kernels::cpu::linear_f32(pool, x, rows, k, weight_.as<const float>(), n, out);
    }
    if (!bias_.empty()) {
        const float* b = bias_.as<float>();
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < n; ++j) out[r * n + j] += b[j];
        }
    }
}

}  // namespace moeserve::model
