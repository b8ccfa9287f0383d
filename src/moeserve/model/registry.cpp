#include "moeserve/model/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moeserve/core/error.h"
#include "moeserve/core/load_pool.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/model/architecture.h"
#include "moeserve/model/formats/gguf.h"

namespace moeserve::model {

std::vector<std::string> supported_model_types() {
    std::vector<std::string> types;
    for (const Architecture& a : architectures()) types.push_back(a.model_type);
    return types;
}
std::vector<std::string> config_only_model_types() { return {}; }

namespace {

// The architecture row of config's model_type; an unknown one lists the supported types.
const Architecture& architecture_of(const io::HfConfig& config) {
    const std::string model_type = config.get_string("model_type", "");
    const Architecture* arch = find_architecture(model_type);
    if (arch == nullptr) {
        raise(ErrorCode::kUnsupported, "{}: model_type '{}' is not supported; supported: {}", config.label(),
              model_type.empty() ? "(missing)" : model_type, fmt::join(supported_model_types(), ", "));
    }
    return *arch;
}

// options with the checkpoint's quantization, --dtype and --kv-cache-dtype resolved.
LoadOptions resolve_load_options(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                 const LoadOptions& options) {
    LoadOptions resolved = options;
    resolved.quant = resolve_quantization(config, options.quantization, model_dir);
    // "auto" follows the checkpoint's dtype (transformers writes torch_dtype, newer ones dtype).
    const std::string torch_dtype = config.get_string("torch_dtype", config.get_string("dtype", "bfloat16"));
    const bool f32 = parse_dtype_is_f32(options.dtype);
    resolved.quant.f32_weights = f32;
    // --kv-cache-dtype auto follows --dtype when it is given, as in vLLM
    const DType model_dtype = f32 || (options.dtype == "auto" && torch_dtype == "float32") ? DType::kF32 : DType::kBF16;
    resolved.kv_dtype = parse_kv_cache_dtype(options.kv_cache_dtype, model_dtype);
    return resolved;
}

// An unquantized checkpoint holds every tensor of the specs with the spec's shape (its float
// dtype may differ: f32 and f16 are converted at load). Quantized checkpoints store other
// shapes and names (scales, packed or renamed tensors); their loaders check them.
void check_tensor_index(const io::WeightSource& weights, const std::vector<WeightSpec>& specs) {
    for (const WeightSpec& spec : specs) {
        if (!weights.contains(spec.name)) {
            raise(ErrorCode::kInvalidModel, "{}: tensor '{}' is missing (the config.json architecture needs it)",
                  weights.dir().string(), spec.name);
        }
        const io::TensorInfo& info = weights.info(spec.name);
        if (!(info.shape == spec.shape)) {
            raise(ErrorCode::kInvalidModel, "{}: shape {}, but config.json's architecture needs {}",
                  weights.describe(spec.name), info.shape.str(), spec.shape.str());
        }
    }
}

// The architecture that loads GGUF file g, with the flags a GGUF file allows checked.
const Architecture& gguf_architecture(const io::HfConfig& config, const std::filesystem::path& path,
                                      const LoadOptions& options) {
    const std::string model_type = config.get_string("model_type", "");
    const Architecture* arch = find_architecture(model_type);
    if (arch == nullptr || arch->load_weights == nullptr) {
        raise(ErrorCode::kUnsupported, "{}: model_type '{}' cannot be loaded from GGUF", path.string(), model_type);
    }
    if (!options.quantization.empty() && options.quantization != "none") {
        raise(ErrorCode::kInvalidArgument,
              "--quantization {}: a GGUF file runs the types it stores; leave --quantization out for {}",
              options.quantization, path.string());
    }
    parse_kv_cache_dtype(options.kv_cache_dtype, parse_dtype_is_f32(options.dtype) ? DType::kF32 : DType::kBF16);
    return *arch;
}

// A GGUF file (formats/gguf.h): its metadata as the config, its tensors under checkpoint names.
std::unique_ptr<Model> load_gguf_model(const ModelSource& source, ThreadPool& pool, const LoadOptions& options) {
    const Architecture* arch = &gguf_architecture(source.config, source.path, options);
    GgufModel g = map_gguf_model(source.gguf, source.config);
    LoadOptions resolved = options;
    resolved.quant = Quantization{};
    resolved.quant.format = "gguf";
    resolved.quant.described_as = g.description;
    resolved.quant.f32_weights = parse_dtype_is_f32(options.dtype);
    resolved.kv_dtype =
        parse_kv_cache_dtype(options.kv_cache_dtype, resolved.quant.f32_weights ? DType::kF32 : DType::kBF16);
    return arch->load_weights(g.config, std::move(g.weights), pool, resolved);
}
}  // namespace

bool parse_dtype_is_f32(const std::string& text) {
    if (text == "auto" || text == "bfloat16" || text == "bf16") return false;
    if (text == "float32" || text == "float" || text == "fp32") return true;
    if (text == "half" || text == "float16" || text == "fp16") {
        raise(ErrorCode::kInvalidArgument,
              "--dtype {}: float16 is not run here (no f16 kernels on CPU); use bfloat16 (the checkpoint's weights) "
              "or float32 (widened at load)",
              text);
    }
    raise(ErrorCode::kInvalidArgument, "--dtype {}: expected auto, bfloat16 (bf16) or float32 (float, fp32)", text);
}

ModelSource open_model_source(const std::filesystem::path& path) {
    if (!is_gguf_path(path)) return {path, io::HfConfig::from_model_dir(path.string()), nullptr};
    auto file = std::make_shared<const io::GgufCheckpoint>(path);
    io::HfConfig config(gguf_config_json(*file), path.string());
    return {path, std::move(config), std::move(file)};
}

std::unique_ptr<Model> load_model(const ModelSource& source, ThreadPool& pool, const LoadOptions& options) {
    const LoadPoolScope scope(pool);
    if (source.gguf) return load_gguf_model(source, pool, options);
    const Architecture& arch = architecture_of(source.config);
    return arch.load(source.config, source.path, pool, resolve_load_options(source.config, source.path, options));
}

std::unique_ptr<Model> load_model(const std::filesystem::path& model_dir, ThreadPool& pool,
                                  const LoadOptions& options) {
    return load_model(open_model_source(model_dir), pool, options);
}

void check_model(const ModelSource& source, const LoadOptions& options) {
    if (source.gguf) {
        // The header and the tensor table were read when the source was opened: a truncated file failed there.
        gguf_architecture(source.config, source.path, options);
        map_gguf_model(source.gguf, source.config);  // every tensor the architecture needs, with its shape
        return;
    }
    const Architecture& arch = architecture_of(source.config);
    const LoadOptions resolved = resolve_load_options(source.config, source.path, options);
    const std::vector<WeightSpec> specs = arch.weight_specs(source.config);  // parses every field it needs
    const auto weights = io::WeightSource::open(source.path);                // maps the files, checks each header
    if (resolved.quant.checkpoint == CheckpointQuant::kNone) check_tensor_index(*weights, specs);
}

void check_model(const std::filesystem::path& model_dir, const LoadOptions& options) {
    check_model(open_model_source(model_dir), options);
}

}  // namespace moeserve::model
