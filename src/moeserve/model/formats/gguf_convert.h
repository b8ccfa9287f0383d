// Writing GGUF files from a Hugging Face checkpoint (moeserve make-model --format gguf) and the
// inverse for references: a GGUF file's weights dequantized into an f32 safetensors checkpoint
// with its config.json and tokenizer files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moeserve/core/ggml_type.h"
#include "moeserve/core/tensor.h"

namespace moeserve::model {

struct GgufWriteOptions {
    GgmlType type = GgmlType::kQ8_0;  // the matrices' type (see gguf_write_type)
    uint64_t max_split_bytes = 0;     // > 0: split files PREFIX-0000i-of-0000N.gguf (gguf-split's layout)
    // (part of a GGUF tensor name, type): the first entry whose part the name contains replaces
    // `type` for that tensor, as llama-quantize's --tensor-type and its per-layer choices mix
    // types in one file (Q4_K_M: Q6_K attn_v / output, Q5_0 or Q8_0 expert down projections)
    std::vector<std::pair<std::string, GgmlType>> tensor_types;
    // The tokenizer.json text when model_dir has none but a tokenizer the caller can express as one
    // (a tiktoken folder: the tokenizer module converts it, and model/ cannot include that module).
    std::optional<std::string> tokenizer_json;
};

// The type a tensor is written as: 1-D tensors (norms, biases) and the router (ffn_gate_inp)
// F32, as llama-quantize keeps them; other tensors `requested` when their rows are whole blocks of
// it, else Q8_0 when they are whole 32-blocks, else F32.
GgmlType gguf_write_type(const std::string& gguf_name, const Shape& shape, GgmlType requested);

// Reads model_dir (config.json, the safetensors weights, tokenizer.json + tokenizer_config.json
// when present) and writes `out` (a .gguf path; with max_split_bytes the split files are named
// after it without the extension). Returns the files written. Throws kUnsupported for a
// model_type or configuration with no GGUF form, naming it.
std::vector<std::filesystem::path> write_gguf_from_checkpoint(const std::filesystem::path& model_dir,
                                                              const std::filesystem::path& out,
                                                              const GgufWriteOptions& options);

// Writes out_dir/config.json (the metadata's config), model.safetensors (every tensor dequantized
// to F32 under its checkpoint name), gguf_types.json ({checkpoint name: GGUF type}, which tells a
// reference the activation quantization of each product) and the tokenizer files, if any.
void write_dequantized_checkpoint(const std::filesystem::path& gguf, const std::filesystem::path& out_dir);

}  // namespace moeserve::model
