// Weight quantization of a checkpoint (config.json quantization_config; each format is one file
// under model/formats/, formats/checkpoint_format.h) and of the run (--quantization):
// compressed-tensors W8A8 int8 (int8 weights, per-output-channel weight_scale,
// dynamic per-token symmetric int8 activations), DeepSeek FP8 (F8_E4M3 weights with
// weight_scale_inv per 128 x 128 block), int4 weights with f32 activations (W4A16:
// compressed-tensors pack-quantized, AWQ, GPTQ; formats/int4_config.h), and load-time W8A8 / W4A16
// of a bf16 checkpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::model {

enum class CheckpointQuant {
    kNone,       // bf16 / f16 / f32 weights
    kW8A8Int8,   // compressed-tensors int-quantized: PREFIX.weight I8 + PREFIX.weight_scale
    kFp8Block,   // quant_method fp8: PREFIX.weight F8_E4M3 + PREFIX.weight_scale_inv [ceil(out/br), ceil(in/bc)]
    kModelSlim,  // Ascend ModelSlim: quant_model_description.json names each tensor's type (docs/quantization.md)
    // MindSpore golden-stick A8W8 (quant_method osl, MindFormers names; model/formats/mindformers_checkpoint.h
    // presents it under HF names): static attention with per-channel input_scale, dynamic MLPs
    kGoldenStick,
    kInt4,  // 4-bit weights with group scales (W4A16); Quantization::int4_config says which layout
    // quant_method mxfp4 (gpt-oss): the experts as PREFIX_blocks + PREFIX_scales, the rest bf16
    kMxfp4,
};

// The layout of an int4 checkpoint (formats/int4_config.h parses it from quantization_config).
enum class Int4Layout {
    kCompressedTensors,  // pack-quantized: PREFIX.weight_packed I32 [out, in/8] + weight_scale (+ weight_zero_point)
    kAwq,                // AutoAWQ GEMM: PREFIX.qweight I32 [in, out/8] (interleaved nibbles) + qzeros + scales
    kGptq,               // GPTQ: PREFIX.qweight I32 [in/8, out] + qzeros + scales (+ g_idx)
};

struct Int4Config {
    Int4Layout layout = Int4Layout::kCompressedTensors;
    int64_t group_size = 128;        // input columns per scale; 0: one group per row (per-channel)
    bool symmetric = true;           // compressed-tensors: no weight_zero_point (zero 8)
    bool gptq_zero_plus_one = true;  // GPTQ v1 (checkpoint_format gptq): stored zeros are one less
    bool desc_act = false;           // GPTQ: groups follow an activation order (g_idx; the loader reads g_idx itself)
    // compressed-tensors W4A8: input_activations 8-bit symmetric, dynamic per token (runs W4A8 by default)
    bool int8_activations = false;
};

// How one linear of a ModelSlim checkpoint is stored and run (its quant_model_description type).
enum class LinearScheme {
    kFloat,        // FLOAT: bf16 / f16 / f32 weights
    kW8A8Dynamic,  // W8A8_DYNAMIC: I8 weight + weight_scale, dynamic per-token int8 activations
    kW8A8Static,   // W8A8: I8 weight, per-tensor input_scale/input_offset, int32 quant_bias, deq_scale
    kW4A16,        // int4 weights with group scales, f32 activations (formats/int4_weights.h)
    kW4A8,         // the same int4 weights, dynamic per-token int8 activations (W4A8_DYNAMIC, --quantization w4a8)
};

// How a layer may be quantized. The code that builds the layer says it (MoeBlock's router, MLA's
// kv_b_proj, MoeDecoder's lm_head; WeightSpec::precision tells the generator), never a rule on
// tensor names, so a router or an absorbed projection of a new architecture is covered whatever
// its checkpoint calls it.
enum class LayerPrecision {
    kQuantizable,  // runs W8A8 when the checkpoint or --quantization asks (an ignore list still applies)
    kHigh,         // always f32 / bf16; quantized checkpoints keep it unquantized (routers, embeddings)
    kDequantized,  // always f32 / bf16, from the 8 bits a quantized checkpoint may store (MLA's kv_b_proj,
                   // absorbed into attention)
    kOutputHead,   // lm_head, or the embedding tied to it: W8A8 only with int8_lm_head; stored unquantized
};

// What the loader counted, for the load log (shared by the copies of a Quantization; atomics:
// ranks may load in parallel threads).
struct LinearCounts {
    std::atomic<int64_t> float_linears{0}, dynamic_linears{0}, static_linears{0};
    std::atomic<int64_t> dynamic_experts{0}, float_experts{0};  // routed / shared / dense MLP experts
    std::atomic<int64_t> int4_linears{0}, int4_experts{0};      // W4A16 / W4A8
    std::atomic<int64_t> fp8_linears{0}, fp8_experts{0};        // FP8 W8A16
    std::atomic<int64_t> mxfp4_experts{0};                      // MXFP4 blocks (gpt-oss)
};

struct Quantization {
    CheckpointQuant checkpoint = CheckpointQuant::kNone;
    bool int8 = false;          // run linears and experts as W8A8 int8
    bool int8_lm_head = false;  // also the lm_head (llama.cpp's Q8_0 does; vLLM's W8A8 does not)
    bool int4 = false;          // run linears and experts as W4A16 (int4_config's group size)
    bool w4a8 = false;          // ... with int8 activations (W4A8): the int4 modules' scheme is kW4A8
    // An FP8 checkpoint's FP8 weights run as stored (W8A16, formats/fp8_blocks.h): the default for
    // FP8 checkpoints; --quantization none widens them to bf16 instead.
    bool fp8 = false;
    // An MXFP4 checkpoint's experts run as stored (GGUF MXFP4 blocks, formats/mxfp4_hf.h): the
    // default; --quantization none widens them to bf16.
    bool mxfp4 = false;
    Int4Config int4_config{};
    int64_t block_rows = 128, block_cols = 128;  // FP8 weight_block_size
    std::vector<std::string> ignore;             // compressed-tensors ignore: module names, or "re:<regex>"
    std::string format = "none";                 // for logs: none | compressed-tensors | fp8 | modelslim
    // ModelSlim: tensor name -> type, from `description_file` (meta keys and non-string values left out).
    std::shared_ptr<const std::map<std::string, std::string>> modelslim;
    std::string description_file;
    // --dtype float32: every weight that is not run in int8 (bf16, F16, FP8 dequantized) is held
    // as f32, and the float kernels take their f32 path; false: bf16 as the checkpoint has it.
    bool f32_weights = false;
    // A checkpoint format that describes itself (a GGUF file: its types); describe() returns it.
    std::string described_as{};
    std::shared_ptr<LinearCounts> counts = std::make_shared<LinearCounts>();

    // The scheme of module (weight name without ".weight"), as the checkpoint's format says
    // (formats/checkpoint_format.h): ModelSlim from its description (errors name the tensor and
    // the file), golden-stick by role, the others W4A16 / W8A8 dynamic where int4_module /
    // int8_module, else kFloat.
    LinearScheme scheme(const std::string& module, LayerPrecision precision = LayerPrecision::kQuantizable) const;

    // Whether the module (weight name without ".weight", e.g. "model.layers.0.self_attn.q_proj")
    // runs in int8: int8 is on, the module is not on the ignore list, and its precision allows it
    // (kHigh and kDequantized never; kOutputHead only with int8_lm_head).
    bool int8_module(const std::string& module, LayerPrecision precision = LayerPrecision::kQuantizable) const;
    // The same rule for int4 (W4A16 / W4A8: int4 on instead of int8; the lm_head is never int4); a
    // format that names each module's scheme (ModelSlim's W4A8_DYNAMIC) decides itself.
    bool int4_module(const std::string& module, LayerPrecision precision = LayerPrecision::kQuantizable) const;
    // The same rule for FP8 W8A16 (fp8 on; kQuantizable layers only, so a router, MLA's absorbed
    // kv_b_proj and the lm_head widen their FP8 weights).
    bool fp8_module(const std::string& module, LayerPrecision precision = LayerPrecision::kQuantizable) const;
    // Whether the module is on the checkpoint's ignore list (a name or "re:<regex>").
    bool ignored(const std::string& module) const;
    // "unquantized checkpoint, running bf16 (...)", "fp8 checkpoint (blocks 128x128), running FP8
    // W8A16 (...)", ... with the loader's counts, for logs.
    std::string describe() const;
};

// Resolves what the checkpoint holds (config.json quantization_config, read by the first of
// formats/checkpoint_format.h's config_formats() that knows it; absent -> kNone) and what the
// user asked (that format's resolve_run): requested "" or "auto" (as the checkpoint: W8A8 runs int8, FP8 runs FP8
// W8A16, int4 runs W4A16), "w8a8" (int8; quantizes bf16 and FP8 weights at load), "w8a8-all" (w8a8 and the lm_head in
// int8 too, overriding an ignore list's lm_head), "w4a16" / "w4a8" (int4 in groups of 128, asymmetric, with f32 / int8
// activations; quantizes bf16 and FP8 weights at load; an int4 checkpoint runs either as stored), "fp8" (an FP8
// checkpoint, run as FP8), "none" (dequantize everything to bf16/f32). Errors (kInvalidArgument / kUnsupported) name
// config.json or the flag, what was found and what is supported.
Quantization resolve_quantization(const io::HfConfig& config, const std::string& requested);
// As above, and first looks in model_dir for a ModelSlim description (formats/modelslim.h):
// present, the checkpoint is ModelSlim whatever config.json's quantization_config says.
Quantization resolve_quantization(const io::HfConfig& config, const std::string& requested,
                                  const std::filesystem::path& model_dir);

// ModelSlim/OmniInfer W8A8_DYNAMIC and W4A8_DYNAMIC: PREFIX.weight_offset and
// PREFIX.weight_offset_second (W4A8's per group), when present, must be all zeros (symmetric
// weights); Error kUnsupported naming the tensor otherwise.
void check_weight_offset_zero(const io::WeightSource& weights, const std::string& weight_name);

// The weight tensor `name` (PREFIX.weight [rows, cols]) as f32 with the checkpoint's scales
// applied: F8_E4M3 times PREFIX.weight_scale_inv blocks, I8 times PREFIX.weight_scale per row,
// other dtypes converted. Error kInvalidModel when a scale is missing or has the wrong shape.
Tensor load_dequantized_f32(const io::WeightSource& weights, const std::string& name, int64_t block_rows = 128,
                            int64_t block_cols = 128);
// The block scales of F8_E4M3 weight `name` [rows, cols] (NAME_scale_inv [ceil(rows / block_rows),
// ceil(cols / block_cols)]) as f32. Error kInvalidModel when missing or of another size.
Tensor load_fp8_block_scales(const io::WeightSource& weights, const std::string& name, int64_t rows, int64_t cols,
                             int64_t block_rows, int64_t block_cols);

// Per-output-channel int8 weights: data int8 [rows, cols], scale f32 [rows].
struct Int8Matrix {
    Tensor data;
    Tensor scale;
};

// The weight `name` [rows, cols] as per-channel int8: an I8 checkpoint tensor is taken with its
// weight_scale as is; anything else is dequantized to f32 and quantized per row (symmetric,
// absmax / 127, round half to even: the quantize_rows_int8 op).
Int8Matrix load_int8_matrix(const io::WeightSource& weights, const std::string& name, const Quantization& quant);

// Quantizes f32 rows [rows, cols] per row into an Int8Matrix (the same rounding as the loader and
// the generator use).
Int8Matrix quantize_matrix_int8(const float* w, int64_t rows, int64_t cols);

}  // namespace moeserve::model
