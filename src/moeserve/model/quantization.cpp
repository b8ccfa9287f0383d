// Parsing of quantization_config, dequantization of FP8 block-scaled and int8 per-channel
// checkpoint weights, and per-channel int8 quantization of weights at load time.
#include "moeserve/model/quantization.h"

#include <cmath>
#include <cstring>
#include <regex>

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"
#include "moeserve/io/json_file.h"
#include "moeserve/kernels/cpu/quantize_int8.h"
#include "moeserve/model/formats/int4_config.h"

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
        nlohmann::json w = g.contains("weights") ? g["weights"] : nlohmann::json();
        if (w.is_object() && w.contains("num_bits") && w["num_bits"].is_object()) {
            // OmniInfer: {module substring: bits}, for W4A8 mixes; all 8 is plain W8A8
            for (const auto& [module, bits] : w["num_bits"].items()) {
                if (!bits.is_number_integer() || bits.get<int>() != 8) {
                    raise(ErrorCode::kUnsupported,
                          "{}: config group '{}' weights.num_bits gives '{}' {} bits; only 8-bit weights (W8A8) are "
                          "supported",
                          where, group, module, bits.dump());
                }
            }
            w["num_bits"] = 8;
        }
        if (!w.is_object() || !w.value("num_bits", nlohmann::json(0)).is_number_integer() ||
            w.value("num_bits", 0) != 8 || w.value("type", "") != "int" || w.value("strategy", "") != "channel" ||
            !w.value("symmetric", true)) {
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

const char* const kModelSlimMetaKeys[] = {"model_quant_type",  "version",       "group_size",
                                          "kv_cache_type",     "kv_quant_type", "fa_quant_type",
                                          "reduce_quant_type", "metadata",      "optional"};

// The description file of a ModelSlim checkpoint in dir, or "" when there is none.
std::filesystem::path find_modelslim_description(const std::filesystem::path& dir) {
    std::error_code ec;
    auto exact = dir / "quant_model_description.json";
    if (std::filesystem::exists(exact, ec)) return exact;
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("quant_model_description_", 0) == 0 && ends_with(name, ".json")) found.push_back(entry.path());
    }
    if (found.size() > 1) {
        raise(ErrorCode::kInvalidModel, "{}: {} and {} are both ModelSlim descriptions; keep one", dir.string(),
              found[0].filename().string(), found[1].filename().string());
    }
    return found.empty() ? std::filesystem::path() : found[0];
}

}  // namespace

std::map<std::string, std::string> parse_modelslim_description(const nlohmann::json& j, const std::string& label) {
    if (!j.is_object()) {
        raise(ErrorCode::kInvalidModel,
              "{}: a ModelSlim description must be a JSON object of tensor name -> type; "
              "got {}",
              label, j.type_name());
    }
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : j.items()) {
        bool meta = false;
        for (const char* m : kModelSlimMetaKeys) meta = meta || key == m;
        if (meta || !value.is_string()) continue;
        out.emplace(key, value.get<std::string>());
    }
    return out;
}

namespace {
// golden-stick (ds_utils.py create_ptq('osl')): attention static, `feed_forward` (dense MLPs,
// shared and routed experts) dynamic, lkv2kv (kv_b_proj) and lm_head left out; routers are no
// linears it quantizes (both kHigh / kDequantized layers, answered before this).
LinearScheme golden_stick_scheme(const std::string& module) {
    if (module.find(".self_attn.") != std::string::npos) return LinearScheme::kW8A8Static;
    if (module.find(".mlp.") != std::string::npos) return LinearScheme::kW8A8Dynamic;
    return LinearScheme::kFloat;
}

bool always_high(LayerPrecision precision) {
    return precision == LayerPrecision::kHigh || precision == LayerPrecision::kDequantized;
}
}  // namespace

LinearScheme Quantization::scheme(const std::string& module, LayerPrecision precision) const {
    if (checkpoint == CheckpointQuant::kGoldenStick) {
        return always_high(precision) ? LinearScheme::kFloat : golden_stick_scheme(module);
    }
    if (checkpoint != CheckpointQuant::kModelSlim) {
        if (int4_module(module, precision)) return LinearScheme::kW4A16;
        return int8_module(module, precision) ? LinearScheme::kW8A8Dynamic : LinearScheme::kFloat;
    }
    const std::string name = module + ".weight";
    const auto it = modelslim->find(name);
    if (it == modelslim->end()) {
        raise(ErrorCode::kInvalidModel,
              "{}: no entry for '{}'; a ModelSlim description must give every linear's type (add \"{}\": "
              "\"FLOAT\" for an unquantized one)",
              description_file, name, name);
    }
    const bool high = always_high(precision);  // a router, MLA's kv_b_proj: kept dequantized
    if (it->second == "FLOAT") return LinearScheme::kFloat;
    if (it->second == "W8A8_DYNAMIC") return high ? LinearScheme::kFloat : LinearScheme::kW8A8Dynamic;
    if (it->second == "W8A8" && !high) return LinearScheme::kW8A8Static;
    raise(ErrorCode::kUnsupported,
          "{}: '{}' has type '{}'; moeserve runs the ModelSlim types FLOAT, W8A8 and W8A8_DYNAMIC{}", description_file,
          name, it->second, high ? " (and a router or kv_b_proj only as FLOAT or W8A8_DYNAMIC)" : "");
}

bool Quantization::int8_module(const std::string& module, LayerPrecision precision) const {
    if (checkpoint == CheckpointQuant::kModelSlim || checkpoint == CheckpointQuant::kGoldenStick) {
        return scheme(module, precision) == LinearScheme::kW8A8Dynamic;
    }
    if (!int8) return false;
    if (precision == LayerPrecision::kOutputHead) return int8_lm_head;
    return !always_high(precision) && !ignored(module);
}

bool Quantization::int4_module(const std::string& module, LayerPrecision precision) const {
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
    if (!described_as.empty()) return described_as;
    if (checkpoint == CheckpointQuant::kModelSlim) {
        return fmt::format(
            "ModelSlim checkpoint ({}): {} W8A8 static + {} W8A8_DYNAMIC + {} FLOAT linears, "
            "{} W8A8_DYNAMIC + {} FLOAT expert groups",
            std::filesystem::path(description_file).filename().string(), counts->static_linears.load(),
            counts->dynamic_linears.load(), counts->float_linears.load(), counts->dynamic_experts.load(),
            counts->float_experts.load());
    }
    if (checkpoint == CheckpointQuant::kGoldenStick) {
        return fmt::format(
            "golden-stick A8W8 checkpoint (MindFormers names): {} static + {} dynamic + {} FLOAT linears, "
            "{} dynamic + {} FLOAT expert groups",
            counts->static_linears.load(), counts->dynamic_linears.load(), counts->float_linears.load(),
            counts->dynamic_experts.load(), counts->float_experts.load());
    }
    if (int4) {
        const std::string group =
            int4_config.group_size == 0 ? std::string("per channel") : fmt::format("group {}", int4_config.group_size);
        return fmt::format(
            "{}, running W4A16 int4 ({}, {}): {} int4 + {} high-precision linears, {} int4 + {} float "
            "expert groups",
            checkpoint == CheckpointQuant::kInt4 ? fmt::format("{} checkpoint", format)
                                                 : std::string("quantized at load"),
            group, int4_config.symmetric ? "symmetric" : "asymmetric", counts->int4_linears.load(),
            counts->float_linears.load(), counts->int4_experts.load(), counts->float_experts.load());
    }
    if (fp8) {
        return fmt::format(
            "fp8 checkpoint (blocks {}x{}), running FP8 W8A16: {} fp8 + {} high-precision linears, {} fp8 + {} "
            "float expert groups (high precision: routers, kv_b_proj, the lm_head, and weights whose columns are not "
            "whole 128-wide blocks)",
            block_rows, block_cols, counts->fp8_linears.load(), counts->float_linears.load(),
            counts->fp8_experts.load(), counts->float_experts.load());
    }
    const std::string counted = fmt::format(" ({} int8 + {} high-precision linears, {} int8 + {} float expert groups)",
                                            counts->dynamic_linears.load(), counts->float_linears.load(),
                                            counts->dynamic_experts.load(), counts->float_experts.load());
    std::string ck = checkpoint == CheckpointQuant::kW8A8Int8 ? "compressed-tensors w8a8 int8 checkpoint"
                     : checkpoint == CheckpointQuant::kFp8Block
                         ? fmt::format("fp8 checkpoint (blocks {}x{})", block_rows, block_cols)
                     : checkpoint == CheckpointQuant::kInt4 ? fmt::format("int4 {} checkpoint", format)
                                                            : std::string("unquantized checkpoint");
    return ck +
           (int8          ? (int8_lm_head ? ", running W8A8 int8 (lm_head too)" : ", running W8A8 int8")
            : f32_weights ? ", running f32 (--dtype float32)"
                          : ", running bf16") +
           counted;
}

Quantization resolve_quantization(const io::HfConfig& config, const std::string& requested,
                                  const std::filesystem::path& model_dir) {
    const std::filesystem::path desc = find_modelslim_description(model_dir);
    if (desc.empty() && requested == "ascend") {
        raise(ErrorCode::kInvalidArgument,
              "--quantization ascend needs a ModelSlim checkpoint; {} has no quant_model_description.json",
              model_dir.string());
    }
    if (desc.empty()) return resolve_quantization(config, requested);
    // "ascend": what older vllm-ascend releases needed for these checkpoints
    if (!requested.empty() && requested != "auto" && requested != "ascend") {
        raise(ErrorCode::kInvalidArgument,
              "--quantization '{}': {} is a ModelSlim checkpoint ({}), which runs as stored; drop the flag or pass "
              "auto (or ascend)",
              requested, model_dir.string(), desc.filename().string());
    }
    Quantization q;
    q.checkpoint = CheckpointQuant::kModelSlim;
    q.format = "modelslim";
    q.int8 = true;
    q.description_file = desc.string();
    q.modelslim = std::make_shared<const std::map<std::string, std::string>>(
        parse_modelslim_description(io::read_json_file(desc), desc.string()));
    return q;
}

namespace {
// An int4 checkpoint runs as stored ("", auto, w4a16) or dequantized to bf16 (none).
Quantization resolve_int4_run(Quantization q, const io::HfConfig& config, const std::string& requested) {
    if (requested.empty() || requested == "auto" || requested == "w4a16") {
        q.int4 = true;
    } else if (requested != "none") {
        raise(ErrorCode::kInvalidArgument,
              "--quantization '{}': {} is an int4 ({}) checkpoint; pass w4a16 (as stored), none (bf16) or leave it out",
              requested, config.label(), q.format);
    }
    return q;
}
}  // namespace

Quantization resolve_quantization(const io::HfConfig& config, const std::string& requested) {
    Quantization q;
    const nlohmann::json& root = config.json();
    const nlohmann::json* qc = root.contains("quantization_config") ? &root["quantization_config"] : nullptr;
    if (qc && qc->is_object()) {
        const std::string method = qc->value("quant_method", "");
        if (auto int4 = parse_int4_config(*qc, config.label(), q.ignore)) {
            q.checkpoint = CheckpointQuant::kInt4;
            q.int4_config = *int4;
            q.format = int4_layout_name(int4->layout);
        } else if (method == "compressed-tensors") {
            check_compressed_tensors(*qc, config.label());
            q.checkpoint = CheckpointQuant::kW8A8Int8;
            q.format = "compressed-tensors";
            if (qc->contains("ignore") && (*qc)["ignore"].is_array()) {
                for (const auto& s : (*qc)["ignore"]) q.ignore.push_back(s.get<std::string>());
            }
        } else if (method == "npu_w8a8_dynamic") {
            // OmniInfer's later scheme: W8A8_DYNAMIC by another name, weight_scale [N] or [N, 1]
            q.checkpoint = CheckpointQuant::kW8A8Int8;
            q.format = "npu_w8a8_dynamic (OmniInfer)";
            for (const char* key : {"ignore", "ignored_layers"}) {
                if (qc->contains(key) && (*qc)[key].is_array()) {
                    for (const auto& s : (*qc)[key]) q.ignore.push_back(s.get<std::string>());
                }
            }
        } else if (method == "osl") {
            // golden-stick A8W8 (the MindFormers yaml's quant_method; docs/quantization.md)
            q.checkpoint = CheckpointQuant::kGoldenStick;
            q.format = "golden-stick";
        } else if (method == "fp8") {
            q.checkpoint = CheckpointQuant::kFp8Block;
            q.format = "fp8";
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
                  "int8 and pack-quantized W4A16, awq, gptq, npu_w8a8_dynamic, fp8 with weight_block_size, osl "
                  "(golden-stick A8W8); ModelSlim checkpoints "
                  "are recognised by "
                  "their quant_model_description.json)",
                  config.label(), method);
        }
    }
    if (q.checkpoint == CheckpointQuant::kGoldenStick) {
        if (!requested.empty() && requested != "auto") {
            raise(ErrorCode::kInvalidArgument,
                  "--quantization '{}': {} is a MindSpore golden-stick A8W8 checkpoint, which runs as stored; drop "
                  "the flag or pass auto",
                  requested, config.label());
        }
        q.int8 = true;
        return q;
    }
    if (q.checkpoint == CheckpointQuant::kInt4) return resolve_int4_run(q, config, requested);
    if (requested.empty() || requested == "auto") {
        q.int8 = q.checkpoint == CheckpointQuant::kW8A8Int8;
        q.fp8 = q.checkpoint == CheckpointQuant::kFp8Block;
    } else if (requested == "w4a16") {
        q.int4 = true;
        q.int4_config = Int4Config{.layout = Int4Layout::kCompressedTensors, .group_size = 128, .symmetric = false};
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
        q.fp8 = true;
    } else if (requested == "none") {
        q.int8 = false;
    } else {
        raise(ErrorCode::kInvalidArgument,
              "--quantization '{}' is not supported (expected w8a8, w8a8-all, w4a16, fp8 or none)", requested);
    }
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
        check_weight_offset_zero(weights, name);
        Int8Matrix m{Tensor(DType::kI8, {rows, cols}), weights.load_f32(sname)};
        std::memcpy(m.data.data(), w.data, size_t(rows * cols));
        return m;
    }
    const Tensor f = load_dequantized_f32(weights, name, quant.block_rows, quant.block_cols);
    return quantize_matrix_int8(f.as<float>(), rows, cols);
}

void check_weight_offset_zero(const io::WeightSource& weights, const std::string& weight_name) {
    const std::string oname = module_of(weight_name) + ".weight_offset";
    if (!weights.contains(oname)) return;
    const Tensor off = weights.load_f32(oname);
    for (int64_t i = 0; i < off.numel(); ++i) {
        if (off.as<float>()[i] != 0.0f) {
            raise(ErrorCode::kUnsupported,
                  "'{}' has a nonzero value ({}) at {}; moeserve runs symmetric int8 weights only (weight_offset all "
                  "zeros)",
                  oname, off.as<float>()[i], i);
        }
    }
}

namespace {

// The single value of a [1] (or []) per-tensor parameter, as f32.
float scalar_param(const io::WeightSource& weights, const std::string& name) {
    if (!weights.contains(name)) {
        raise(ErrorCode::kInvalidModel, "static W8A8 tensor '{}' is missing from {}", name, weights.dir().string());
    }
    const TensorView v = weights.get(name);
    if (v.numel() != 1) {
        raise(ErrorCode::kInvalidModel, "'{}' has shape {}; a per-tensor activation parameter has one value", name,
              v.shape.str());
    }
    if (v.dtype != DType::kF32 && v.dtype != DType::kBF16 && v.dtype != DType::kF16) {
        raise(ErrorCode::kInvalidModel, "'{}' has dtype {}; expected F32, BF16 or F16", name, dtype_name(v.dtype));
    }
    return weights.load_f32(name).as<float>()[0];
}

}  // namespace

namespace {

// golden-stick: PREFIX.input_scale [in] or [1] (F32/BF16/F16, positive finite: divisors) and
// PREFIX.input_offset I8 [in] or [1] holding one zero point.
void load_golden_stick_activation(const io::WeightSource& weights, const std::string& prefix, int64_t in_features,
                                  StaticInt8Matrix& m) {
    const std::string sname = prefix + ".input_scale", zname = prefix + ".input_offset";
    for (const std::string& n : {sname, zname}) {
        if (!weights.contains(n)) {
            raise(ErrorCode::kInvalidModel, "static A8W8 tensor '{}' is missing from {}", weights.stored_name(n),
                  weights.dir().string());
        }
    }
    const TensorView s = weights.get(sname);
    if ((s.dtype != DType::kF32 && s.dtype != DType::kBF16 && s.dtype != DType::kF16) || s.shape.rank() != 1 ||
        (s.numel() != in_features && s.numel() != 1)) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; expected BF16, F16 or F32 [{}] (or [1])", weights.describe(sname),
              dtype_name(s.dtype), s.shape.str(), in_features);
    }
    const Tensor sf = weights.load_f32(sname);
    m.x_div = Tensor(DType::kF32, {in_features});
    for (int64_t k = 0; k < in_features; ++k) {
        const float v = sf.as<float>()[s.numel() == 1 ? 0 : k];
        if (!(v > 0.0f) || !std::isfinite(v)) {
            raise(ErrorCode::kInvalidModel, "{} is {} at {}; an input_scale (a divisor) must be positive and finite",
                  weights.describe(sname), v, k);
        }
        m.x_div.as<float>()[k] = v;
    }
    const TensorView z = weights.get(zname);
    if (z.dtype != DType::kI8 || z.shape.rank() != 1 || (z.numel() != in_features && z.numel() != 1)) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; expected I8 [{}] (or [1])", weights.describe(zname),
              dtype_name(z.dtype), z.shape.str(), in_features);
    }
    const auto* zp = static_cast<const int8_t*>(z.data);
    for (int64_t k = 1; k < z.numel(); ++k) {
        if (zp[k] != zp[0]) {
            raise(ErrorCode::kUnsupported,
                  "{} holds {} at 0 but {} at {}; moeserve runs one zero point per linear (golden-stick tiles z_x)",
                  weights.describe(zname), int{zp[0]}, int{zp[k]}, k);
        }
    }
    m.input_offset = static_cast<float>(zp[0]);
}

}  // namespace

StaticInt8Matrix load_static_int8(const io::WeightSource& weights, const std::string& prefix, int64_t out_features,
                                  int64_t in_features, bool golden_stick) {
    StaticInt8Matrix m;
    const std::string wname = prefix + ".weight";
    const TensorView w = weights.get(wname);
    if (w.dtype != DType::kI8 || !(w.shape == Shape{out_features, in_features})) {
        raise(ErrorCode::kInvalidModel, "static W8A8 weight {} is {} {}; expected I8 [{}, {}]", weights.describe(wname),
              dtype_name(w.dtype), w.shape.str(), out_features, in_features);
    }
    m.data = Tensor(DType::kI8, {out_features, in_features});
    std::memcpy(m.data.data(), w.data, static_cast<size_t>(out_features * in_features));
    if (golden_stick) {
        load_golden_stick_activation(weights, prefix, in_features, m);
    } else {
        m.input_scale = scalar_param(weights, prefix + ".input_scale");
        m.input_offset = scalar_param(weights, prefix + ".input_offset");
        if (!(m.input_scale > 0.0f) || !std::isfinite(m.input_scale)) {
            raise(ErrorCode::kInvalidModel, "'{}.input_scale' is {}; it must be a positive finite number", prefix,
                  m.input_scale);
        }
        if (m.input_offset != std::nearbyint(m.input_offset) || m.input_offset < -128.0f || m.input_offset > 127.0f) {
            raise(ErrorCode::kInvalidModel, "'{}.input_offset' is {}; a zero point must be an integer in [-128, 127]",
                  prefix, m.input_offset);
        }
        // vllm-ascend: input_scale in the params dtype (bf16), its reciprocal in bf16 too
        m.x_mul = bf16_to_f32(f32_to_bf16(1.0f / bf16_to_f32(f32_to_bf16(m.input_scale))));
    }
    // deq_scale [N]: F32, or I64 (F32 bits in the low 32 bits: the fp16-model form)
    const std::string dname = prefix + ".deq_scale";
    if (!weights.contains(dname)) {
        raise(ErrorCode::kInvalidModel, "static W8A8 tensor '{}' is missing from {}", weights.stored_name(dname),
              weights.dir().string());
    }
    const TensorView d = weights.get(dname);
    if (d.numel() != out_features || d.shape.rank() != 1) {
        raise(ErrorCode::kInvalidModel, "{} has shape {}; expected [{}] (one per output channel)",
              weights.describe(dname), d.shape.str(), out_features);
    }
    m.deq_scale = Tensor(DType::kF32, {out_features});
    float* ds = m.deq_scale.as<float>();
    if (d.dtype == DType::kF32) {
        std::memcpy(ds, d.data, static_cast<size_t>(out_features) * 4);
    } else if (d.dtype == DType::kI64) {
        for (int64_t i = 0; i < out_features; ++i) {
            int64_t v;
            std::memcpy(&v, static_cast<const char*>(d.data) + i * 8, 8);
            const auto bits = static_cast<uint32_t>(static_cast<uint64_t>(v) & 0xFFFFFFFFu);
            std::memcpy(&ds[i], &bits, 4);
        }
    } else {
        raise(ErrorCode::kInvalidModel,
              "{} has dtype {}; a static deq_scale is F32 (bf16 models) or I64 holding f32 bits (fp16 models)",
              weights.describe(dname), dtype_name(d.dtype));
    }
    const std::string bname = prefix + ".quant_bias";
    if (!weights.contains(bname)) {
        raise(ErrorCode::kInvalidModel, "static W8A8 tensor '{}' is missing from {}", weights.stored_name(bname),
              weights.dir().string());
    }
    const TensorView b = weights.get(bname);
    if (b.dtype != DType::kI32 || b.numel() != out_features || b.shape.rank() != 1) {
        raise(ErrorCode::kInvalidModel, "{} is {} {}; expected I32 [{}]", weights.describe(bname), dtype_name(b.dtype),
              b.shape.str(), out_features);
    }
    m.quant_bias = Tensor(DType::kI32, {out_features});
    std::memcpy(m.quant_bias.data(), b.data, static_cast<size_t>(out_features) * 4);
    return m;
}

void check_fused_shards(const io::WeightSource& weights, const Quantization& quant,
                        const std::vector<std::string>& modules) {
    if (quant.checkpoint != CheckpointQuant::kModelSlim || modules.size() < 2) return;
    const LinearScheme first = quant.scheme(modules[0]);
    for (size_t i = 1; i < modules.size(); ++i) {
        if (quant.scheme(modules[i]) != first) {
            raise(ErrorCode::kInvalidModel,
                  "{}: '{}.weight' and '{}.weight' share an input (one fused matmul) but have different types",
                  quant.description_file, modules[0], modules[i]);
        }
        if (first != LinearScheme::kW8A8Static) continue;
        for (const char* p : {".input_scale", ".input_offset"}) {
            const float a = scalar_param(weights, modules[0] + p), b = scalar_param(weights, modules[i] + p);
            if (a != b) {
                raise(ErrorCode::kInvalidModel,
                      "'{}{}' = {} but '{}{}' = {}: linears that share an input must share its static quantization "
                      "(vllm-ascend keeps one per fused module)",
                      modules[0], p, a, modules[i], p, b);
            }
        }
    }
}

}  // namespace moeserve::model
