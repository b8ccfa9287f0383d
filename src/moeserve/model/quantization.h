// Weight quantization of a checkpoint (config.json quantization_config) and of the run
// (--quantization): compressed-tensors W8A8 int8 (int8 weights, per-output-channel weight_scale,
// dynamic per-token symmetric int8 activations), DeepSeek FP8 (F8_E4M3 weights with
// weight_scale_inv per 128 x 128 block), and load-time W8A8 of a bf16 checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"

namespace moeserve::model {

enum class CheckpointQuant {
    kNone,      // bf16 / f16 / f32 weights
    kW8A8Int8,  // compressed-tensors int-quantized: PREFIX.weight I8 + PREFIX.weight_scale
    kFp8Block,  // quant_method fp8: PREFIX.weight F8_E4M3 + PREFIX.weight_scale_inv [ceil(out/br), ceil(in/bc)]
};

struct Quantization {
    CheckpointQuant checkpoint = CheckpointQuant::kNone;
    bool int8 = false;                           // run linears and experts as W8A8 int8
    bool int8_lm_head = false;                   // also the lm_head (llama.cpp's Q8_0 does; vLLM's W8A8 does not)
    int64_t block_rows = 128, block_cols = 128;  // FP8 weight_block_size
    std::vector<std::string> ignore;             // compressed-tensors ignore: module names, or "re:<regex>"

    // Whether the module (weight name without ".weight", e.g. "model.layers.0.mlp.gate") runs in
    // int8: int8 is on and the module is not high precision. High precision: the ignore list,
    // lm_head (or the tied embedding) unless int8_lm_head, routers (*.mlp.gate) and MLA's
    // kv_b_proj (its weight is absorbed into attention in f32/bf16, so it is dequantized).
    bool int8_module(const std::string& module) const;
    // "none", "w8a8 (compressed-tensors)", "fp8 block 128x128 -> bf16", ... for logs.
    std::string describe() const;
};

// Resolves what the checkpoint holds (config.json quantization_config, absent -> kNone) and what
// the user asked: requested "" or "auto" (as the checkpoint: W8A8 runs int8, FP8 converts to
// bf16), "w8a8" (int8; quantizes bf16 and FP8 weights at load), "w8a8-all" (w8a8 and the
// lm_head in int8 too, overriding an ignore list's lm_head), "fp8" (an FP8 checkpoint,
// converted to bf16), "none" (dequantize everything to bf16/f32). Errors (kInvalidArgument /
// kUnsupported) name config.json or the flag, what was found and what is supported.
Quantization resolve_quantization(const io::HfConfig& config, const std::string& requested);

// The weight tensor `name` (PREFIX.weight [rows, cols]) as f32 with the checkpoint's scales
// applied: F8_E4M3 times PREFIX.weight_scale_inv blocks, I8 times PREFIX.weight_scale per row,
// other dtypes converted. Error kInvalidModel when a scale is missing or has the wrong shape.
Tensor load_dequantized_f32(const io::WeightSource& weights, const std::string& name, int64_t block_rows = 128,
                            int64_t block_cols = 128);

// Per-output-channel int8 weights: data int8 [rows, cols], scale f32 [rows].
struct Int8Matrix {
    Tensor data;
    Tensor scale;
};

// The weight `name` [rows, cols] as per-channel int8: an I8 checkpoint tensor is taken with its
// weight_scale as is; anything else is dequantized to f32 and quantized per row (symmetric,
// absmax / 127, round half to even: kernels::cpu::quantize_rows_int8).
Int8Matrix load_int8_matrix(const io::WeightSource& weights, const std::string& name, const Quantization& quant);

// Quantizes f32 rows [rows, cols] per row into an Int8Matrix (the same rounding as the loader and
// the generator use).
Int8Matrix quantize_matrix_int8(const float* w, int64_t rows, int64_t cols);

}  // namespace moeserve::model
