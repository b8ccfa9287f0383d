// Parsing of quantization_config, dequantization of FP8 block-scaled and int8 per-channel
// checkpoint weights, and per-channel int8 quantization of weights at load time.
#include "moeserve/model/quantization.h"

#include <cstring>
#include <regex>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::model {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string module_of(const std::string& weight_name) {
    return ends_with(weight_name, ".weight") ? weight_name.substr(0, weight_name.size() - 7) : weight_name;
}

// compressed-tensors: config_groups.<g>.weights {num_bits 8, type int, strategy channel,
// symmetric}, input_activations {dynamic, strategy token}; format int-quantized.
void check_compressed_tensors(const nlohmann::json& q, const std::string& where) {
    const std::string format = q.value("format", "");
    if (format != "int-quantized" && format != "pack-quantized" && !format.empty()) {
        raise(ErrorCode::kUnsupported, "{}: quantization_config.format '{}' is not supported (expected int-quantized)",
              where, format);
    }
    if (!q.contains("config_groups") || !q["config_groups"].is_object()) {
        raise(ErrorCode::kInvalidModel, "{}: compressed-tensors quantization_config has no config_groups", where);
    }
    for (const auto& [group, g] : q["config_groups"].items()) {
        const auto& w = g.contains("weights") ? g["weights"] : nlohmann::json();
        if (!w.is_object() || w.value("num_bits", 0) != 8 || w.value("type", "") != "int" ||
            w.value("strategy", "") != "channel" || !w.value("symmetric", true)) {
            raise(ErrorCode::kUnsupported,
                  "{}: config group '{}' weights must be 8-bit symmetric int per channel (W8A8); got {}", where, group,
                  w.dump());
        }
        const auto& a = g.contains("input_activations") ? g["input_activations"] : nlohmann::json();
        if (!a.is_object() || a.value("num_bits", 0) != 8 || !a.value("dynamic", false) ||
            a.value("strategy", "") != "token" || !a.value("symmetric", true)) {
            raise(ErrorCode::kUnsupported,
                  "{}: config group '{}' input_activations must be dynamic 8-bit symmetric per token; got {}", where,
                  group, a.dump());
        }
    }
}

}  // namespace

bool Quantization::int8_module(const std::string& module) const {
    if (!int8) return false;
    if (module == "lm_head" || module == "model.embed_tokens") return int8_lm_head;
    if (ends_with(module, ".mlp.gate") || ends_with(module, "kv_b_proj")) return false;
    for (const std::string& pattern : ignore) {
        if (pattern.rfind("re:", 0) == 0) {
            if (std::regex_match(module, std::regex(pattern.substr(3)))) return false;
        } else if (module == pattern) {
            return false;
        }
    }
    return true;
}

std::string Quantization::describe() const {
    std::string ck = checkpoint == CheckpointQuant::kW8A8Int8 ? "w8a8 int8 checkpoint"
                     : checkpoint == CheckpointQuant::kFp8Block
                         ? fmt::format("fp8 checkpoint (blocks {}x{})", block_rows, block_cols)
                         : std::string("unquantized checkpoint");
    return ck +
           (int8 ? (int8_lm_head ? ", running W8A8 int8 (lm_head too)" : ", running W8A8 int8") : ", running bf16");
}

Quantization resolve_quantization(const io::HfConfig& config, const std::string& requested) {
    Quantization q;
    const nlohmann::json& root = config.json();
    const nlohmann::json* qc = root.contains("quantization_config") ? &root["quantization_config"] : nullptr;
    if (qc && qc->is_object()) {
        const std::string method = qc->value("quant_method", "");
        if (method == "compressed-tensors") {
            check_compressed_tensors(*qc, config.label());
            q.checkpoint = CheckpointQuant::kW8A8Int8;
            if (qc->contains("ignore") && (*qc)["ignore"].is_array()) {
                for (const auto& s : (*qc)["ignore"]) q.ignore.push_back(s.get<std::string>());
            }
        } else if (method == "fp8") {
            q.checkpoint = CheckpointQuant::kFp8Block;
            if (qc->value("fmt", "e4m3") != "e4m3") {
                raise(ErrorCode::kUnsupported, "{}: fp8 fmt '{}' is not supported (expected e4m3)", config.label(),
                      qc->value("fmt", ""));
            }
            if (qc->contains("weight_block_size")) {
                const auto& b = (*qc)["weight_block_size"];
                if (!b.is_array() || b.size() != 2 || b[0].get<int64_t>() < 1 || b[1].get<int64_t>() < 1) {
                    raise(ErrorCode::kInvalidModel,
                          "{}: quantization_config.weight_block_size must be [rows, cols]; "
                          "got {}",
                          config.label(), b.dump());
                }
                q.block_rows = b[0].get<int64_t>();
                q.block_cols = b[1].get<int64_t>();
            } else {
                raise(ErrorCode::kUnsupported, "{}: fp8 without weight_block_size (per-tensor FP8) is not supported",
                      config.label());
            }
            if (qc->contains("modules_to_not_convert") && (*qc)["modules_to_not_convert"].is_array()) {
                for (const auto& s : (*qc)["modules_to_not_convert"]) q.ignore.push_back(s.get<std::string>());
            }
        } else {
            raise(ErrorCode::kUnsupported,
                  "{}: quantization_config.quant_method '{}' is not supported (supported: compressed-tensors W8A8 "
                  "int8, fp8 with weight_block_size)",
                  config.label(), method);
        }
    }
    if (requested.empty() || requested == "auto") {
        q.int8 = q.checkpoint == CheckpointQuant::kW8A8Int8;
    } else if (requested == "w8a8") {
        q.int8 = true;
    } else if (requested == "w8a8-all") {
        q.int8 = true;
        q.int8_lm_head = true;
    } else if (requested == "fp8") {
        if (q.checkpoint != CheckpointQuant::kFp8Block) {
            raise(ErrorCode::kInvalidArgument, "--quantization fp8 needs an FP8 checkpoint; {} has none",
                  config.label());
        }
        q.int8 = false;
    } else if (requested == "none") {
        q.int8 = false;
    } else {
        raise(ErrorCode::kInvalidArgument,
              "--quantization '{}' is not supported (expected w8a8, w8a8-all, fp8 or none)", requested);
    }
    return q;
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
        const Tensor s = weights.load_f32(sname);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) p[r * cols + c] *= s.as<float>()[(r / block_rows) * bc + c / block_cols];
        }
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
    kernels::cpu::quantize_rows_int8(w, cols, rows, cols, m.data.as<int8_t>(), cols, m.scale.as<float>());
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
        Int8Matrix m{Tensor(DType::kI8, {rows, cols}), weights.load_f32(sname)};
        std::memcpy(m.data.data(), w.data, size_t(rows * cols));
        return m;
    }
    const Tensor f = load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
    return quantize_matrix_int8(f.as<float>(), rows, cols);
}

}  // namespace moeserve::model
