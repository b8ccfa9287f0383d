#include "moeserve/model/layers/linear.h"

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/core/load_pool.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/fp8_blocks.h"
#include "moeserve/model/formats/gguf_weights.h"
#include "moeserve/model/formats/static_int8.h"
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

// The float form of PREFIX.weight as stored (`view`, mapped): bf16 and f32 stay (bf16 widened
// under quant.f32_weights); F16, I8 and F8_E4M3 are dequantized (FP8 to bf16: exact when the block
// scales are powers of two, as UE8M0 scales are).
FloatWeight float_weight(const io::WeightSource& weights, const std::string& name, TensorView view,
                         const Quantization& quant) {
    FloatWeight w{view, {}, {}};
    switch (view.dtype) {
        case DType::kF32:
            return w;
        case DType::kBF16:
            if (quant.f32_weights) w.owned = weights.load_f32(name);  // --dtype float32: widened once here
            break;
        case DType::kF16:
        case DType::kI8:
            w.owned = load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
            break;
        case DType::kF8E4M3: {
            w.owned = load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
            if (quant.f32_weights) break;
            Tensor bf16(DType::kBF16, view.shape);
            for (int64_t i = 0; i < bf16.numel(); ++i) bf16.as<uint16_t>()[i] = f32_to_bf16(w.owned.as<float>()[i]);
            w.owned = std::move(bf16);
            break;
        }
        default:
            raise(ErrorCode::kUnsupported,
                  "tensor '{}' has dtype {}; linear weights must be BF16, F16, F32, I8 or F8_E4M3", name,
                  dtype_name(view.dtype));
    }
    if (!w.owned.empty()) w.view = w.owned.view();
    return w;
}

// PREFIX's weight in the representation `scheme` names (all but the GGUF and FP8 blocks).
LinearWeight scheme_weight(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                           int64_t in_features, const Quantization& quant, LinearScheme scheme) {
    const std::string name = prefix + ".weight";
    if (scheme == LinearScheme::kW4A16 || scheme == LinearScheme::kW4A8) {
        quant.counts->int4_linears += 1;
        return Int4Weight{load_int4_matrix(weights, prefix, out_features, in_features, quant),
                          scheme == LinearScheme::kW4A8};
    }
    if (stored_as_int4(weights, prefix, quant)) {
        // f32, not bf16: scale * (q - zero) needs up to 4 more mantissa bits than the scale has, so
        // bf16 would round it (MLA's kv_b_proj, absorbed into attention, must match its decode copy)
        quant.counts->float_linears += 1;
        Tensor f32 = load_weight_f32(weights, prefix, out_features, in_features, quant);
        const TensorView view = f32.view();
        return FloatWeight{view, std::move(f32), {}};
    }
    const TensorView stored = get_checked(weights, name, Shape{out_features, in_features});
    if (scheme == LinearScheme::kW8A8Static) {
        StaticInt8Matrix m = load_static_int8(weights, prefix, out_features, in_features,
                                              quant.checkpoint == CheckpointQuant::kGoldenStick);
        quant.counts->static_linears += 1;
        return StaticInt8Weight{std::move(m.data), std::move(m.deq_scale), std::move(m.quant_bias),
                                m.x_mul,           m.input_offset,         std::move(m.x_div)};
    }
    if (scheme == LinearScheme::kW8A8Dynamic) {
        Int8Matrix m = load_int8_matrix(weights, name, quant);
        quant.counts->dynamic_linears += 1;
        return DynamicInt8Weight{std::move(m.data), std::move(m.scale)};
    }
    quant.counts->float_linears += 1;
    return float_weight(weights, name, stored, quant);
}

}  // namespace

Linear Linear::load_fp8(const io::WeightSource& weights, const std::string& prefix, const Shape& shape,
                        const LinearShard& shard, bool has_bias, const Quantization& quant) {
    const int64_t rows = shard.rows < 0 ? shape[0] : shard.rows;
    const int64_t cols = shard.cols < 0 ? shape[1] : shard.cols;
    BlockWeight w;
    w.owned = Tensor(DType::kU8, {static_cast<int64_t>(fp8_packed_bytes(rows, cols))});
    pack_fp8_rows(weights, prefix + ".weight", shape, shard.row_begin, rows, shard.col_begin, cols, quant,
                  w.owned.as<uint8_t>());
    w.matrix = fp8_matrix(w.owned.as<const uint8_t>(), rows, cols);
    quant.counts->fp8_linears += 1;
    Linear l;
    l.weight_ = std::move(w);
    if (has_bias) l.bias_ = slice_rows(load_vector_f32(weights, prefix + ".bias", shape[0]), shard.row_begin, rows);
    return l;
}

void Linear::pack_for_kernels(const io::WeightSource& weights, const std::string& name) {
    if (auto* b = std::get_if<BlockWeight>(&weight_)) {
        if (b->owned.empty()) b->owned = gguf_pack_for_kernels(weights, {&b->matrix}, {name});  // else FP8, packed
        return;
    }
    auto* f = std::get_if<FloatWeight>(&weight_);
    if (f == nullptr || f->view.dtype != DType::kBF16) return;
    const kernels::Ops& ops = kernels::ops();
    const int64_t n = f->view.dim(0), k = f->view.dim(1);
    const size_t bytes = ops.bf16_packed_bytes(n, k);
    if (bytes == 0) return;
    f->packed = Tensor(DType::kBF16, {static_cast<int64_t>(bytes / 2)});
    ops.pack_bf16(load_pool(), f->view.as<const uint16_t>(), n, k, f->packed.as<uint16_t>());
    // The panels are what the layer reads now: the stored rows leave the resident set.
    if (f->owned.empty()) {
        weights.drop_resident(name);
    } else {
        f->owned = Tensor();
        f->view.data = nullptr;
    }
}

Linear Linear::load(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                    int64_t in_features, bool has_bias, const Quantization& quant, LayerPrecision precision) {
    Linear l = load_stored(weights, prefix, out_features, in_features, has_bias, quant, precision);
    l.pack_for_kernels(weights, prefix + ".weight");
    return l;
}

Linear Linear::load_stored(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                           int64_t in_features, bool has_bias, const Quantization& quant, LayerPrecision precision) {
    const std::string name = prefix + ".weight";
    Linear l;
    if (const auto g = gguf_matrix(weights, name, out_features, in_features)) {
        l.weight_ = BlockWeight{*g, {}};
        quant.counts->float_linears += 1;
    } else if (quant.fp8_module(prefix, precision) && fp8_packable(weights, name, quant, 0, in_features)) {
        return load_fp8(weights, prefix, {out_features, in_features}, {}, has_bias, quant);
    } else {
        l.weight_ = scheme_weight(weights, prefix, out_features, in_features, quant, quant.scheme(prefix, precision));
    }
    // NOTE(#20): a float PREFIX.bias next to a static linear is already folded into quant_bias
    if (has_bias && !std::holds_alternative<StaticInt8Weight>(l.weight_)) {
        l.bias_ = load_vector_f32(weights, prefix + ".bias", out_features);
    }
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
    Linear full = load_stored(weights, prefix, out_features, in_features, has_bias, quant, precision);
    if (rows == out_features && cols == in_features) {
        full.pack_for_kernels(weights, prefix + ".weight");
        return full;
    }
    Linear l;
    if (const auto* int4 = std::get_if<Int4Weight>(&full.weight_)) {
        l.weight_ = Int4Weight{load_int4_rectangle(weights, prefix, out_features, in_features, shard.row_begin, rows,
                                                   shard.col_begin, cols, quant),
                               int4->int8_activations};
    } else {
        l.weight_ = weight_rectangle(full.weight_, shard, prefix + ".weight");
    }
    l.bias_ = slice_rows(full.bias_, shard.row_begin, rows);
    l.pack_for_kernels(weights, prefix + ".weight");
    return l;
}

void Linear::forward(ThreadPool& pool, const float* x, int64_t rows, float* out) const {
    run_linear(pool, weight_, x, rows, out);
    if (bias_.empty()) return;
    const int64_t n = out_features();
    const float* b = bias_.as<float>();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) out[r * n + j] += b[j];
    }
}

}  // namespace moeserve::model
