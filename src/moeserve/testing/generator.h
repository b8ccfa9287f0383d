// Deterministic random-weight model generator: writes a real Hugging Face model directory
// (config.json, bf16 safetensors with the exact HF tensor names, optional shards + index, the real
// tokenizer files) for an architecture at a preset size, optionally as W8A8 int8 or FP8
// block-scaled. Same seed, same bytes, on every machine.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace moeserve::testing {

struct GeneratorOptions {
    std::string arch = "qwen3_moe";  // a model_type of the generator table (generator_architecture.h)
    std::string size = "tiny";       // tiny (tests) | bench (~1B parameters, performance)
    uint64_t seed = 0;
    std::filesystem::path out_dir;
    std::filesystem::path tokenizer_dir;  // holds tokenizer.json + tokenizer_config.json
    int num_shards = 1;                   // > 1 writes model-0000i-of-0000N + index
    // config.json overrides, "key=json value", e.g. "q_lora_rank=null", "num_hidden_layers=2".
    std::vector<std::string> overrides;
    // "" (bf16), "w8a8" (compressed-tensors int8: linear weights I8 + weight_scale [out, 1] per
    // channel, ignore lm_head and routers), "fp8" (F8_E4M3 + weight_scale_inv per 128 x 128 block,
    // power-of-two scales), "modelslim-w8a8" (Ascend ModelSlim mix: static W8A8 attention with a
    // calibration pass, W8A8_DYNAMIC MLPs/experts, FLOAT rest, RMSNorm biases, quant_model_*
    // files), "modelslim-w8a8-dynamic" (every linear W8A8_DYNAMIC), "modelslim-w4a8" (the mix with
    // the routed experts W4A8_DYNAMIC, two int4 rows per byte, per-group second scales;
    // formats/modelslim_w4a8_writer.h), "modelslim-w4a8-channel" (the same with one int4 value per
    // byte and one scale per row: an older saver), "omniinfer-w8a8"
    // (compressed-tensors with OmniInfer's ignore list and shard names), "mindspore-a8w8" (DeepSeek
    // only: MindSpore golden-stick A8W8 in MindFormers names, generator_mindformers.h). All quantize
    // the same bf16 weights the plain model has.
    std::string quantization;
    // Set: the config.json and the weights of this checkpoint (bf16 or f32) instead of the preset
    // and random ones, e.g. a trained model written in a quantized layout; arch must be its
    // model_type. Tensors the architecture's specs do not list (an MTP layer) are left out.
    std::filesystem::path from_dir;
};

// The preset config.json of an architecture and size; Error kInvalidArgument for unknown ones.
nlohmann::json preset_config(const std::string& arch, const std::string& size);

struct GeneratedModel {
    int64_t num_parameters = 0;
    int64_t num_bytes = 0;
    int64_t num_tensors = 0;
};

// Writes the directory (created if missing; existing model files replaced).
GeneratedModel generate_random_model(const GeneratorOptions& options);

}  // namespace moeserve::testing
