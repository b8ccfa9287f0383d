#include "moeserve/model/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moeserve/core/error.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/deepseek_v3/config.h"
#include "moeserve/model/deepseek_v3/model.h"
#include "moeserve/model/mindformers_checkpoint.h"
#include "moeserve/model/qwen3_moe/model.h"

namespace moeserve::model {

std::vector<std::string> supported_model_types() { return {"qwen3_moe", "deepseek_v3", "deepseek_v2"}; }
std::vector<std::string> config_only_model_types() { return {}; }

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

std::unique_ptr<Model> load_model(const std::filesystem::path& model_dir, ThreadPool& pool,
                                  const LoadOptions& options) {
    const io::HfConfig config = io::HfConfig::from_model_dir(model_dir.string());
    const std::string model_type = config.get_string("model_type", "");
    LoadOptions resolved = options;
    if (model_type == "qwen3_moe" || model_type == "deepseek_v3" || model_type == "deepseek_v2") {
        resolved.quant = resolve_quantization(config, options.quantization, model_dir);
        // "auto" follows the checkpoint's dtype (transformers writes torch_dtype, newer ones dtype).
        const std::string torch_dtype = config.get_string("torch_dtype", config.get_string("dtype", "bfloat16"));
        const bool f32 = parse_dtype_is_f32(options.dtype);
        resolved.quant.f32_weights = f32;
        // --kv-cache-dtype auto follows --dtype when it is given, as in vLLM
        const DType model_dtype =
            f32 || (options.dtype == "auto" && torch_dtype == "float32") ? DType::kF32 : DType::kBF16;
        resolved.kv_dtype = parse_kv_cache_dtype(options.kv_cache_dtype, model_dtype);
    }
    if (model_type == "qwen3_moe") {
        const Qwen3MoeConfig c = Qwen3MoeConfig::from_json(config);
        std::shared_ptr<const io::WeightSource> weights = io::WeightSource::open(model_dir);
        if (has_mindformers_names(*weights) || resolved.quant.checkpoint == CheckpointQuant::kGoldenStick) {
            // NOTE(#20): the spec (shared/formats/seed-checkpoints.md C.2) maps DeepSeek-V3 names only
            raise(ErrorCode::kUnsupported,
                  "{}: a MindSpore golden-stick / MindFormers checkpoint of qwen3_moe is not supported (moeserve "
                  "loads golden-stick A8W8 for deepseek_v3 only); convert it to HF names first",
                  model_dir.string());
        }
        return std::make_unique<Qwen3MoeModel>(c, std::move(weights), pool, resolved);
    }
    if (model_type == "deepseek_v3" || model_type == "deepseek_v2") {
        const DeepseekV3Config c = DeepseekV3Config::from_json(config);
        std::unique_ptr<io::WeightSource> weights = io::WeightSource::open(model_dir);
        const bool mf_names = has_mindformers_names(*weights);
        if (mf_names && resolved.quant.checkpoint == CheckpointQuant::kNone &&
            (options.quantization.empty() || options.quantization == "auto")) {
            // golden-stick keeps quant_method in the MindFormers yaml: the names are what marks it
            resolved.quant = resolve_quantization(
                io::HfConfig(nlohmann::json{{"quantization_config", {{"quant_method", "osl"}}}}, config.label()), "");
        }
        const bool golden_stick = resolved.quant.checkpoint == CheckpointQuant::kGoldenStick;
        if (mf_names != golden_stick) {
            raise(ErrorCode::kInvalidModel,
                  "{}: {}; a golden-stick A8W8 checkpoint has both quant_method osl (or none) and MindFormers tensor "
                  "names (model.tok_embeddings.embedding_weight), and runs as stored (--quantization auto)",
                  model_dir.string(),
                  mf_names ? "the tensors have MindFormers names but the checkpoint is read as " + resolved.quant.format
                           : std::string("config.json says quant_method osl (golden-stick) but the tensors have HF "
                                         "names"));
        }
        if (golden_stick) weights = mindformers_deepseek_as_hf(std::move(weights), c);
        return std::make_unique<DeepseekV3Model>(c, std::shared_ptr<const io::WeightSource>(std::move(weights)), pool,
                                                 resolved);
    }
    raise(ErrorCode::kUnsupported, "{}: model_type '{}' is not supported; supported: {}", config.label(),
          model_type.empty() ? "(missing)" : model_type, fmt::join(supported_model_types(), ", "));
}

}  // namespace moeserve::model
