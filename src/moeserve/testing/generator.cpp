#include "moeserve/testing/generator.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "moeserve/core/error.h"
#include "moeserve/core/rng.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/json_file.h"
#include "moeserve/io/safetensors_writer.h"
#include "moeserve/model/architecture.h"
#include "moeserve/model/formats/int4_writer.h"
#include "moeserve/model/formats/modelslim_w4a8_writer.h"
#include "moeserve/model/quantization.h"
#include "moeserve/model/registry.h"
#include "moeserve/testing/generator_architecture.h"
#include "moeserve/testing/generator_parts.h"
#include "moeserve/testing/mxfp4_writer.h"

namespace moeserve::testing {

namespace fs = std::filesystem;

namespace {

using gen::Calibrator;
using gen::StaticCalibration;
using gen::value_at;

// Linear weights the quantized checkpoints hold in 8 bits: what the layer's precision allows
// (WeightSpec::precision; embeddings, lm_head, routers and norms stay bf16, as in the published
// W8A8 and FP8 checkpoints).
bool quantized_in_checkpoint(const model::WeightSpec& spec) {
    const std::string& n = spec.name;
    const bool linear = spec.shape.rank() == 2 && n.size() >= 7 && n.compare(n.size() - 7, 7, ".weight") == 0;
    return linear && (spec.precision == model::LayerPrecision::kQuantizable ||
                      spec.precision == model::LayerPrecision::kDequantized);
}

// Adds `t` (bf16 [rows, cols]) to the writer in the requested 8-bit form, or as is. Returns the
// names written.
std::vector<std::string> add_quantized(io::SafetensorsWriter& writer, const std::string& name, Tensor t,
                                       const std::string& quantization) {
    const int64_t rows = t.shape()[0], cols = t.shape()[1];
    std::vector<float> f(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_f32(t.as<uint16_t>()[i]);
    if (quantization == "w8a8" || quantization == "omniinfer-w8a8") {
        model::Int8Matrix m = model::quantize_matrix_int8(f.data(), rows, cols);
        writer.add(name, DType::kI8, {rows, cols}, m.data.data());
        writer.add(name + "_scale", DType::kF32, {rows, 1}, m.scale.data());
        return {name, name + "_scale"};
    }
    // fp8: per 128 x 128 block, scale = the power of two >= absmax / 448 (E4M3's largest finite)
    constexpr int64_t kBlock = 128;
    const int64_t br = (rows + kBlock - 1) / kBlock, bc = (cols + kBlock - 1) / kBlock;
    std::vector<float> scale(static_cast<size_t>(br * bc));
    std::vector<uint8_t> q(f.size());
    for (int64_t bi = 0; bi < br; ++bi) {
        for (int64_t bj = 0; bj < bc; ++bj) {
            float amax = 0.0f;
            for (int64_t r = bi * kBlock; r < std::min(rows, (bi + 1) * kBlock); ++r) {
                for (int64_t c = bj * kBlock; c < std::min(cols, (bj + 1) * kBlock); ++c) {
                    amax = std::max(amax, std::fabs(f[static_cast<size_t>(r * cols + c)]));
                }
            }
            const float s = amax > 0.0f ? std::exp2(std::ceil(std::log2(amax / 448.0f))) : 1.0f;
            scale[static_cast<size_t>(bi * bc + bj)] = s;
            for (int64_t r = bi * kBlock; r < std::min(rows, (bi + 1) * kBlock); ++r) {
                for (int64_t c = bj * kBlock; c < std::min(cols, (bj + 1) * kBlock); ++c) {
                    q[static_cast<size_t>(r * cols + c)] = f32_to_f8e4m3(f[static_cast<size_t>(r * cols + c)] / s);
                }
            }
        }
    }
    writer.add(name, DType::kF8E4M3, {rows, cols}, q.data());
    writer.add(name + "_scale_inv", DType::kF32, {br, bc}, scale.data());
    return {name, name + "_scale_inv"};
}

// Adds `t` (bf16 [rows, cols], name PREFIX.weight) as int4 in cfg's layout; counts its bytes.
std::vector<std::string> add_int4(io::SafetensorsWriter& writer, const std::string& name, const Tensor& t,
                                  const model::Int4Config& cfg, GeneratedModel& result) {
    const int64_t rows = t.shape()[0], cols = t.shape()[1];
    std::vector<float> f(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_f32(t.as<uint16_t>()[i]);
    // an act order follows the input: gate_proj and up_proj share one (as GPTQ's, from one Hessian)
    std::string order_key = name;
    if (const auto at = order_key.find("up_proj"); at != std::string::npos) order_key.replace(at, 7, "gate_proj");
    const model::Int4Matrix m = model::quantize_int4_for(f.data(), rows, cols, cfg, gen::fnv1a(order_key));
    result.num_bytes +=
        static_cast<int64_t>(m.codes.nbytes() + m.scale.nbytes() / 2) - static_cast<int64_t>(t.nbytes());
    return model::add_int4_tensors(writer, name.substr(0, name.size() - std::string(".weight").size()), m, cfg);
}

// ------------------------------------------------------------------------------------------------
// Ascend ModelSlim (docs/quantization.md#modelslim): quant_model_description.json + per-linear
// tensors. The mix ("modelslim-w8a8") quantizes attention statically (per-tensor activation scale
// and zero point from the calibration below) and MLPs/experts dynamically, and adds RMSNorm
// biases after input_layernorm and q_a_layernorm as the anti-outlier pass leaves them.

// The W4A8 mix ("modelslim-w4a8": the "1.0.0" saver's packed rows, per group; "-channel": an
// older saver's one value per byte, one scale per row): the DeepSeek W4A8 recipe, the W8A8 mix with
// the routed experts W4A8_DYNAMIC.
bool is_modelslim_w4a8(const std::string& q) { return q == "modelslim-w4a8" || q == "modelslim-w4a8-channel"; }

bool is_modelslim(const std::string& q) {
    return q == "modelslim-w8a8" || q == "modelslim-w8a8-dynamic" || is_modelslim_w4a8(q);
}

// Whether the mix quantizes attention statically (modelslim-w8a8 and the W4A8 mix).
bool static_attention(const std::string& q) { return q == "modelslim-w8a8" || is_modelslim_w4a8(q); }

bool routed_expert(const std::string& name) { return name.find(".mlp.experts.") != std::string::npos; }

// The W4A8 mix's group size: the largest of 256 / 128 / 64 / 32 that divides every routed expert's
// input width (0 for the per-channel variant).
int64_t w4a8_group_size(const std::string& q, const std::vector<model::WeightSpec>& specs) {
    if (q != "modelslim-w4a8") return 0;
    for (int64_t g : {256, 128, 64, 32}) {
        const bool divides = std::all_of(specs.begin(), specs.end(), [&](const model::WeightSpec& s) {
            return !routed_expert(s.name) || s.shape.rank() != 2 || s.shape[1] % g == 0;
        });
        if (divides) return g;
    }
    return 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string module_of(const std::string& weight_name) { return weight_name.substr(0, weight_name.size() - 7); }

// The quantized linears the mix quantizes statically: the attention projections.
bool static_in_mix(const std::string& name) { return name.find(".self_attn.") != std::string::npos; }

// Writes the ModelSlim form of linear weight `name` (bf16 t [rows, cols]); records every tensor's
// type in desc. deq_int64: the static deq_scale in its int64 form (f32 bits widened).
std::vector<std::string> add_modelslim(io::SafetensorsWriter& writer, const std::string& name, const Tensor& t,
                                       const StaticCalibration* calib, bool deq_int64, nlohmann::json& desc) {
    const int64_t rows = t.shape()[0], cols = t.shape()[1];
    std::vector<float> f(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_f32(t.as<uint16_t>()[i]);
    const model::Int8Matrix m = model::quantize_matrix_int8(f.data(), rows, cols);
    const std::string module = module_of(name);
    writer.add(name, DType::kI8, {rows, cols}, m.data.data());
    if (calib == nullptr) {
        const std::vector<float> zeros(static_cast<size_t>(rows), 0.0f);
        writer.add(module + ".weight_scale", DType::kF32, {rows, 1}, m.scale.data());
        writer.add(module + ".weight_offset", DType::kF32, {rows, 1}, zeros.data());
        std::vector<std::string> names = {name, module + ".weight_scale", module + ".weight_offset"};
        for (const auto& n : names) desc[n] = "W8A8_DYNAMIC";
        return names;
    }
    // static: D = s_x * s_w (f32), B = rint(-z_x * sum_k W_q) (no float bias)
    std::vector<float> deq(static_cast<size_t>(rows));
    std::vector<int64_t> deq64(static_cast<size_t>(rows));
    std::vector<int32_t> bias(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        deq[size_t(r)] = calib->scale * m.scale.as<float>()[r];
        uint32_t bits;
        std::memcpy(&bits, &deq[size_t(r)], 4);
        deq64[size_t(r)] = static_cast<int64_t>(bits);
        int64_t sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += m.data.as<int8_t>()[r * cols + c];
        bias[size_t(r)] = static_cast<int32_t>(std::nearbyint(-double(calib->offset) * double(sum)));
    }
    writer.add(module + ".input_scale", DType::kF32, {1}, &calib->scale);
    writer.add(module + ".input_offset", DType::kF32, {1}, &calib->offset);
    if (deq_int64) {
        writer.add(module + ".deq_scale", DType::kI64, {rows}, deq64.data());
    } else {
        writer.add(module + ".deq_scale", DType::kF32, {rows}, deq.data());
    }
    writer.add(module + ".quant_bias", DType::kI32, {rows}, bias.data());
    std::vector<std::string> names = {name, module + ".input_scale", module + ".input_offset", module + ".deq_scale",
                                      module + ".quant_bias"};
    for (const auto& n : names) desc[n] = "W8A8";
    return names;
}

nlohmann::json quantization_config(const std::string& quantization) {
    if (quantization == "omniinfer-w8a8") {
        // OmniInfer's converter (docs/quantization.md#omniinfer): compressed-tensors int8,
        // channel weights, token-dynamic activations; the ignore list is set by the caller
        return {{"quant_method", "compressed-tensors"},
                {"format", "int-quantized"},
                {"quantization_status", "compressed"},
                {"kv_cache_scheme", nullptr},
                {"config_groups",
                 {{"group_0",
                   {{"targets", {"Linear"}},
                    {"output_activations", nullptr},
                    {"input_activations",
                     {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"dynamic", true}, {"strategy", "token"}}},
                    {"weights",
                     {{"num_bits", 8},
                      {"type", "int"},
                      {"symmetric", true},
                      {"dynamic", false},
                      {"strategy", "channel"}}}}}}}};
    }
    if (quantization == "w8a8") {
        return {
            {"quant_method", "compressed-tensors"},
            {"format", "int-quantized"},
            {"quantization_status", "compressed"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}},
                {"weights",
                 {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}, {"dynamic", false}}},
                {"input_activations",
                 {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}}}}}}},
            {"ignore", {"lm_head", "re:.*mlp\\.gate$"}}};
    }
    return {
        {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
}

void apply_overrides(nlohmann::json& config, const std::vector<std::string>& overrides) {
    for (const auto& kv : overrides) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) {
            raise(ErrorCode::kInvalidArgument, "config override '{}' must look like key=value", kv);
        }
        const std::string value = kv.substr(eq + 1);
        nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
        config[kv.substr(0, eq)] = parsed.is_discarded() ? nlohmann::json(value) : parsed;
    }
}

// tokenizer.json and tokenizer_config.json, or a tiktoken folder's tiktoken.model and its config.
void copy_tokenizer(const fs::path& from, const fs::path& to) {
    const bool tiktoken = !fs::exists(from / "tokenizer.json") && fs::exists(from / "tiktoken.model");
    for (const char* name : {tiktoken ? "tiktoken.model" : "tokenizer.json", "tokenizer_config.json"}) {
        if (!fs::exists(from / name)) {
            raise(ErrorCode::kNotFound, "tokenizer file {} is missing; run `make setup` (scripts/setup.sh) to fetch it",
                  (from / name).string());
        }
        fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
    }
}

void write_json(const fs::path& path, const nlohmann::json& j) {
    std::ofstream out(path);
    out << j.dump(2) << "\n";
    if (!out) raise(ErrorCode::kIo, "{}: write failed", path.string());
}

// The generator's row of arch; an unknown one is the user's --arch (or --from's model_type).
const GeneratorArchitecture& generator_row(const std::string& arch) {
    const GeneratorArchitecture* a = find_generator_architecture(arch);
    if (a == nullptr) {
        raise(ErrorCode::kInvalidArgument, "unknown architecture '{}' (expected one of: {})", arch,
              fmt::join(model::supported_model_types(), ", "));
    }
    return *a;
}

// The runtime row of a generator row: both tables name the same types (registry_test.cpp).
const model::Architecture& runtime_row(const GeneratorArchitecture& row) {
    const model::Architecture* a = model::find_architecture(row.model_type);
    MOESERVE_CHECK(a != nullptr, "generator row {} has no runtime row", row.model_type);
    return *a;
}

// The checkpoint layout make-model writes for --quantization.
struct WrittenLayout {
    bool modelslim = false, omniinfer = false, mindspore = false;
    bool mxfp4 = false;  // gpt-oss's stacked experts as MXFP4 blocks, the rest bf16
    std::optional<model::Int4Config> int4;
};

WrittenLayout written_layout(const std::string& quant, const GeneratorArchitecture& arch) {
    WrittenLayout l;
    l.modelslim = is_modelslim(quant);
    l.omniinfer = quant == "omniinfer-w8a8";
    l.mindspore = quant == "mindspore-a8w8";
    l.int4 = model::int4_layout_for(quant);
    l.mxfp4 = quant == "mxfp4";
    if (!quant.empty() && quant != "w8a8" && quant != "fp8" && !l.modelslim && !l.omniinfer && !l.mindspore &&
        !l.int4 && !l.mxfp4) {
        raise(
            ErrorCode::kInvalidArgument,
            "--quantization '{}' is not supported (expected w8a8, fp8, w4a16, w4a16-asym, w4a16-act, w4a8, awq, gptq, "
            "gptq-act, modelslim-w8a8, modelslim-w8a8-dynamic, modelslim-w4a8, modelslim-w4a8-channel, omniinfer-w8a8, "
            "mindspore-a8w8 or mxfp4)",
            quant);
    }
    if (l.mxfp4 && arch.model_type != "gpt_oss") {
        raise(ErrorCode::kInvalidArgument, "--quantization mxfp4 is written for gpt_oss (its stacked experts) only");
    }
    if (l.mindspore && arch.write_mindformers == nullptr) {
        raise(ErrorCode::kInvalidArgument,
              "--quantization mindspore-a8w8 is not written for {}: moeserve knows MindFormers names only for "
              "DeepSeek's (deepseek_v3 / deepseek_v2)",
              arch.model_type);
    }
    return l;
}

// config.json's quantization keys for the layout.
void set_quantization_keys(nlohmann::json& config, const std::string& quant, const WrittenLayout& layout,
                           const std::vector<model::WeightSpec>& specs, const GeneratorArchitecture& arch) {
    if (layout.mindspore) {
        // moeserve's convention: golden-stick keeps quant_method in the MindFormers yaml
        config["quantization_config"] = {{"quant_method", "osl"}};
    } else if (layout.int4) {
        config["quantization_config"] = model::int4_quantization_config(*layout.int4, {"lm_head", "re:.*mlp\\.gate$"});
    } else if (layout.mxfp4) {
        // as gpt-oss's released config.json
        config["quantization_config"] = {
            {"quant_method", "mxfp4"},
            {"modules_to_not_convert",
             {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
    } else if (!quant.empty() && !layout.modelslim) {
        config["quantization_config"] = quantization_config(quant);
    }
    if (layout.omniinfer) {
        nlohmann::json ignore = nlohmann::json::array({"lm_head"});
        for (const auto& s : specs) {
            if (s.precision == model::LayerPrecision::kDequantized) ignore.push_back(module_of(s.name));
        }
        config["quantization_config"]["ignore"] = ignore;
    }
    if (layout.modelslim && arch.mla) {
        // what the DeepSeek recipe's hooks add (vllm-ascend does not need them)
        config["quantize"] = "w8a8_dynamic";
        config["mla_quantize"] = static_attention(quant) ? "w8a8" : "w8a8_dynamic";
    }
}

// The output folder exists and holds no weight files of an earlier model.
void clear_model_files(const fs::path& out_dir) {
    fs::create_directories(out_dir);
    for (const auto& entry : fs::directory_iterator(out_dir)) {
        const std::string fname = entry.path().filename().string();
        if (entry.path().extension() == ".safetensors" || ends_with(fname, ".safetensors.index.json") ||
            fname == "quant_model_description.json") {
            fs::remove(entry.path());
        }
    }
}

// One tensor in ModelSlim's layout: quantized linears with their scales (static ones
// calibrated), norms in f32 with the biases the calibration adds, the rest as is. Returns the
// names written; desc gets the quantized ones' types.
std::vector<std::string> add_modelslim_tensor(io::SafetensorsWriter& writer, const model::WeightSpec& spec, Tensor t,
                                              const std::string& quant, const Calibrator& calibrator,
                                              const gen::TensorSource& source, nlohmann::json& desc,
                                              GeneratedModel& result) {
    std::vector<std::string> names;
    // ModelSlim keeps the layers that run dequantized (kv_b_proj) FLOAT
    const int64_t rows = spec.shape.rank() == 2 ? spec.shape[0] : 0, cols = spec.shape.rank() == 2 ? spec.shape[1] : 0;
    if (is_modelslim_w4a8(quant) && routed_expert(spec.name) && quantized_in_checkpoint(spec)) {
        std::vector<float> f(static_cast<size_t>(rows * cols));
        for (size_t i = 0; i < f.size(); ++i) f[i] = value_at(t, static_cast<int64_t>(i));
        const model::ModelSlimW4a8Layout layout{quant == "modelslim-w4a8", desc.value("group_size", int64_t{0})};
        names = model::add_modelslim_w4a8(writer, module_of(spec.name), f.data(), rows, cols, layout, desc);
        result.num_bytes += rows * cols / 2 - static_cast<int64_t>(t.nbytes());
    } else if (quantized_in_checkpoint(spec) && spec.precision == model::LayerPrecision::kQuantizable) {
        const bool is_static = static_attention(quant) && static_in_mix(spec.name);
        const StaticCalibration calib = is_static ? calibrator.calibrate(module_of(spec.name)) : StaticCalibration{};
        const bool deq64 = ends_with(spec.name, "o_proj.weight");  // exercises the int64 form
        names = add_modelslim(writer, spec.name, t, is_static ? &calib : nullptr, deq64, desc);
        result.num_bytes +=
            rows * cols - static_cast<int64_t>(t.nbytes()) + (is_static ? 8 + rows * (deq64 ? 12 : 8) : 8 * rows);
    } else if (spec.init == model::WeightInit::kNormOnes && spec.shape.rank() == 1) {
        // the V1 saver stores norms in f32
        Tensor n32(DType::kF32, spec.shape);
        for (int64_t j = 0; j < t.numel(); ++j) n32.as<float>()[j] = value_at(t, j);
        writer.add(spec.name, std::move(n32));
        names = {spec.name};
        result.num_bytes += 2 * spec.shape[0];  // bf16 -> f32
        const std::string norm = module_of(spec.name);
        if (calibrator.writes_bias(norm)) {
            writer.add(norm + ".bias", source.norm_bias(norm + ".bias", spec.shape[0]));
            names.push_back(norm + ".bias");
            result.num_bytes += 4 * spec.shape[0];
        }
    } else {
        writer.add(spec.name, std::move(t));
        names = {spec.name};
    }
    return names;
}

}  // namespace

nlohmann::json preset_config(const std::string& arch, const std::string& size) {
    return generator_row(arch).preset(arch, size);
}

GeneratedModel generate_random_model(const GeneratorOptions& options) {
    nlohmann::json config;
    std::shared_ptr<const io::WeightSource> checkpoint;
    if (!options.from_dir.empty()) {
        // the checkpoint's own architecture, whatever --arch says
        config = io::read_json_file(options.from_dir / "config.json");
        config.erase("quantization_config");
        checkpoint = io::WeightSource::open(options.from_dir);
    } else {
        config = preset_config(options.arch, options.size);
    }
    const GeneratorArchitecture& arch = generator_row(config.value("model_type", options.arch));
    const gen::TensorSource source =
        checkpoint ? gen::checkpoint_tensors(checkpoint) : gen::random_tensors(options.seed);
    apply_overrides(config, options.overrides);
    const io::HfConfig hf(config, "generated config.json");
    const std::vector<model::WeightSpec> specs = runtime_row(arch).weight_specs(hf);
    const std::string& quant = options.quantization;
    const WrittenLayout layout = written_layout(quant, arch);
    const bool modelslim = layout.modelslim, omniinfer = layout.omniinfer, mindspore = layout.mindspore;
    const std::optional<model::Int4Config>& int4 = layout.int4;
    set_quantization_keys(config, quant, layout, specs, arch);
    const Calibrator calibrator(specs, options.seed, static_attention(quant), source);
    nlohmann::json desc = {{"model_quant_type", "W8A8_DYNAMIC"}};
    if (quant != "modelslim-w4a8-channel") desc["version"] = "1.0.0";  // the older saver writes none
    if (const int64_t g = w4a8_group_size(quant, specs); g > 0) desc["group_size"] = g;
    if (options.num_shards < 1 || options.num_shards > static_cast<int>(specs.size())) {
        raise(ErrorCode::kInvalidArgument, "--shards must be in [1, {}]; got {}", specs.size(), options.num_shards);
    }
    clear_model_files(options.out_dir);

    GeneratedModel result;
    if (mindspore) {
        arch.write_mindformers(specs, hf, options.seed, source, options.num_shards, options.out_dir, result);
    }
    const size_t per_shard =
        (specs.size() + static_cast<size_t>(options.num_shards) - 1) / static_cast<size_t>(options.num_shards);
    nlohmann::json weight_map = nlohmann::json::object();
    for (int shard = 0; shard < (mindspore ? 0 : options.num_shards); ++shard) {
        // ModelSlim's V1 saver and OmniInfer's converter do not name their shards model-*
        const std::string stem = modelslim   ? "quant_model_weights"
                                 : omniinfer ? "quant_model_weight_w8a8_dynamic"
                                             : "model";
        const std::string file =
            options.num_shards == 1 && !omniinfer
                ? stem + ".safetensors"
                : fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, shard + 1, options.num_shards);
        io::SafetensorsWriter writer;
        const size_t begin = static_cast<size_t>(shard) * per_shard;
        const size_t end = std::min(specs.size(), begin + per_shard);
        for (size_t i = begin; i < end; ++i) {
            Tensor t = source.weight(specs[i]);
            result.num_parameters += t.numel();
            result.num_bytes += static_cast<int64_t>(t.nbytes());
            result.num_tensors += 1;
            if (modelslim) {
                for (const auto& n :
                     add_modelslim_tensor(writer, specs[i], std::move(t), quant, calibrator, source, desc, result)) {
                    weight_map[n] = file;
                    if (!desc.contains(n)) desc[n] = "FLOAT";
                }
                continue;
            }
            if (layout.mxfp4 && is_mxfp4_expert_tensor(specs[i].name)) {
                for (const std::string& n : add_mxfp4_expert_tensor(writer, specs[i].name, t)) weight_map[n] = file;
                continue;
            }
            if (int4 && quantized_in_checkpoint(specs[i])) {
                for (const std::string& n : add_int4(writer, specs[i].name, t, *int4, result)) weight_map[n] = file;
                continue;
            }
            if (!options.quantization.empty() && !layout.mxfp4 && quantized_in_checkpoint(specs[i])) {
                const int64_t rows = t.shape()[0], cols = t.shape()[1];
                const int64_t scale_count =
                    options.quantization != "fp8" ? rows : ((rows + 127) / 128) * ((cols + 127) / 128);
                result.num_bytes += rows * cols + 4 * scale_count - static_cast<int64_t>(t.nbytes());
                for (const std::string& n : add_quantized(writer, specs[i].name, std::move(t), options.quantization)) {
                    weight_map[n] = file;
                }
                continue;
            }
            weight_map[specs[i].name] = file;
            writer.add(specs[i].name, std::move(t));
        }
        writer.write(options.out_dir / file);
    }
    if ((options.num_shards > 1 && !mindspore) || omniinfer) {
        write_json(options.out_dir /
                       (modelslim ? "quant_model_weights.safetensors.index.json" : "model.safetensors.index.json"),
                   {{"metadata", {{"total_size", result.num_bytes}}}, {"weight_map", weight_map}});
    }
    if (modelslim) write_json(options.out_dir / "quant_model_description.json", desc);
    write_json(options.out_dir / "config.json", config);
    write_json(
        options.out_dir / "generation_config.json",
        {{"bos_token_id", config["bos_token_id"]}, {"eos_token_id", config["eos_token_id"]}, {"do_sample", false}});
    copy_tokenizer(options.tokenizer_dir, options.out_dir);
    return result;
}

}  // namespace moeserve::testing
