// What a checkpoint's quantization runs as (the formats under model/formats/ read it),
// dequantization of FP8 block-scaled and int8 per-channel checkpoint weights, and per-channel int8
// quantization of weights at load time.
#include "moeserve/model/quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"
#include "moeserve/core/load_pool.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/checkpoint_format.h"
#include "moeserve/model/formats/modelslim.h"

namespace moeserve::model {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string module_of(const std::string& weight_name) {
    return ends_with(weight_name, ".weight") ? weight_name.substr(0, weight_name.size() - 7) : weight_name;
}

}  // namespace

LinearScheme Quantization::scheme(const std::string& module, LayerPrecision precision) const {
    return checkpoint_format(checkpoint).scheme(*this, module, precision);
}

bool Quantization::int8_module(const std::string& module, LayerPrecision precision) const {
    if (checkpoint_format(checkpoint).names_schemes()) return scheme(module, precision) == LinearScheme::kW8A8Dynamic;
    if (!int8) return false;
    if (precision == LayerPrecision::kOutputHead) return int8_lm_head;
    return !always_high(precision) && !ignored(module);
}

bool Quantization::int4_module(const std::string& module, LayerPrecision precision) const {
    if (checkpoint_format(checkpoint).names_schemes()) {
        const LinearScheme s = scheme(module, precision);
        return s == LinearScheme::kW4A16 || s == LinearScheme::kW4A8;
    }
    return int4 && precision == LayerPrecision::kQuantizable && !ignored(module);
}

bool Quantization::fp8_module(const std::string& module, LayerPrecision precision) const {
    return fp8 && precision == LayerPrecision::kQuantizable && !ignored(module);
}

bool Quantization::ignored(const std::string& module) const {
    for (const std::string& pattern : ignore) {
        if (pattern.rfind("re:", 0) == 0) {
            if (std::regex_match(module, std::regex(pattern.substr(3)))) return true;
        } else if (module == pattern) {
            return true;
        }
    }
    return false;
}

std::string Quantization::describe() const {
    return described_as.empty() ? checkpoint_format(checkpoint).describe(*this) : described_as;
}

Quantization resolve_quantization(const io::HfConfig& config, const std::string& requested,
                                  const std::filesystem::path& model_dir) {
    if (auto q = read_modelslim(model_dir, requested)) return *q;
    return resolve_quantization(config, requested);
}

Quantization resolve_quantization(const io::HfConfig& config, const std::string& requested) {
    Quantization q;
    const nlohmann::json& root = config.json();
    const auto qc = root.find("quantization_config");
    if (qc != root.end() && qc->is_object()) {
        const auto& formats = config_formats();
        const bool known = std::any_of(formats.begin(), formats.end(), [&](const CheckpointFormat* f) {
            return f->read_config(*qc, config.label(), q);
        });
        if (!known) {
            raise(ErrorCode::kUnsupported,
                  "{}: quantization_config.quant_method '{}' is not supported (supported: compressed-tensors W8A8 "
                  "int8 and pack-quantized W4A16, awq, gptq, npu_w8a8_dynamic, fp8 with weight_block_size, osl "
                  "(golden-stick A8W8); ModelSlim checkpoints are recognised by their quant_model_description.json)",
                  config.label(), qc->value("quant_method", ""));
        }
    }
    checkpoint_format(q.checkpoint).resolve_run(q, config.label(), requested);
    return q;
}

Tensor load_fp8_block_scales(const io::WeightSource& weights, const std::string& name, int64_t rows, int64_t cols,
                             int64_t block_rows, int64_t block_cols) {
    const std::string sname = name + "_scale_inv";
    if (!weights.contains(sname)) {
        raise(ErrorCode::kInvalidModel, "F8_E4M3 tensor '{}' has no '{}' (block scales) in {}", name, sname,
              weights.dir().string());
    }
    const int64_t br = (rows + block_rows - 1) / block_rows, bc = (cols + block_cols - 1) / block_cols;
    const TensorView sv = weights.get(sname);
    if (sv.numel() != br * bc) {
        raise(ErrorCode::kInvalidModel, "'{}' has shape {}; blocks of {}x{} over {} [{}, {}] need [{}, {}]", sname,
              sv.shape.str(), block_rows, block_cols, name, rows, cols, br, bc);
    }
    return weights.load_f32(sname);
}

Tensor load_dequantized_f32(const io::WeightSource& weights, const std::string& name, int64_t block_rows,
                            int64_t block_cols) {
    const TensorView w = weights.get(name);
    Tensor f = weights.load_f32(name);
    if (w.dtype != DType::kF8E4M3 && w.dtype != DType::kI8) return f;
    MOESERVE_CHECK(w.shape.rank() == 2, "quantized weight {} must be 2-D", name);
    const int64_t rows = w.dim(0), cols = w.dim(1);
    float* p = f.as<float>();
    if (w.dtype == DType::kF8E4M3) {
        const int64_t bc = (cols + block_cols - 1) / block_cols;
        const Tensor s = load_fp8_block_scales(weights, name, rows, cols, block_rows, block_cols);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) p[r * cols + c] *= s.as<float>()[(r / block_rows) * bc + c / block_cols];
        }
        weights.drop_resident(name);  // the caller keeps this copy (or its bf16 / int8 form)
        return f;
    }
    const std::string sname = name + "_scale";
    if (!weights.contains(sname)) {
        raise(ErrorCode::kInvalidModel, "I8 tensor '{}' has no '{}' (per-channel scales) in {}", name, sname,
              weights.dir().string());
    }
    const TensorView sv = weights.get(sname);
    if (sv.numel() != rows) {
        raise(ErrorCode::kInvalidModel, "'{}' has shape {}; per-channel scales of {} need {} values", sname,
              sv.shape.str(), name, rows);
    }
    const Tensor s = weights.load_f32(sname);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) p[r * cols + c] *= s.as<float>()[r];
    }
    return f;
}

Int8Matrix quantize_matrix_int8(const float* w, int64_t rows, int64_t cols) {
    Int8Matrix m{Tensor(DType::kI8, {rows, cols}), Tensor(DType::kF32, {rows})};
    // each row on its own (its own scale), so the load pool's threads can share them out
    load_pool().parallel_for(rows, [&](int64_t begin, int64_t end) {
        kernels::ops().quantize_rows_int8(w + begin * cols, cols, end - begin, cols, m.data.as<int8_t>() + begin * cols,
                                          cols, m.scale.as<float>() + begin);
    });
    return m;
}

Int8Matrix load_int8_matrix(const io::WeightSource& weights, const std::string& name, const Quantization& quant) {
    const TensorView w = weights.get(name);
    MOESERVE_CHECK(w.shape.rank() == 2, "weight {} must be 2-D", name);
    const int64_t rows = w.dim(0), cols = w.dim(1);
    if (w.dtype == DType::kI8) {
        const std::string sname = name + "_scale";
        if (!weights.contains(sname) || weights.get(sname).numel() != rows) {
            raise(ErrorCode::kInvalidModel, "I8 tensor '{}' needs '{}' with {} per-channel scales", name, sname, rows);
        }
        check_weight_offset_zero(weights, name);
        Int8Matrix m{Tensor(DType::kI8, {rows, cols}), weights.load_f32(sname)};
        std::memcpy(m.data.data(), w.data, size_t(rows * cols));
        return m;
    }
    const Tensor f = load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
    return quantize_matrix_int8(f.as<float>(), rows, cols);
}

void check_weight_offset_zero(const io::WeightSource& weights, const std::string& weight_name) {
    for (const char* suffix : {".weight_offset", ".weight_offset_second"}) {
        const std::string oname = module_of(weight_name) + suffix;
        if (!weights.contains(oname)) continue;
        const Tensor off = weights.load_f32(oname);
        for (int64_t i = 0; i < off.numel(); ++i) {
            if (off.as<float>()[i] != 0.0f) {
                raise(ErrorCode::kUnsupported,
                      "'{}' has a nonzero value ({}) at {}; moeserve runs symmetric ModelSlim weights only (offsets "
                      "all zeros)",
                      oname, off.as<float>()[i], i);
            }
        }
    }
}

}  // namespace moeserve::model
