// make-model --quantization mxfp4 (gpt-oss): a stacked expert weight as gpt-oss's released
// checkpoints store it, <name>_blocks [E, out, in / 32, 16] + <name>_scales [E, out, in / 32]
// (formats/mxfp4_hf.h has the layout), quantized as llama.cpp's gguf-py quantizes MXFP4.
#pragma once

#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/io/safetensors_writer.h"

namespace moeserve::testing {

// Whether the generated tensor `name` is one gpt-oss stores in MXFP4 (the stacked expert
// projections gate_up_proj and down_proj, not their biases).
bool is_mxfp4_expert_tensor(const std::string& name);

// t: bf16 [E, in, out] (the Hugging Face input-major stacked layout the generator writes) ->
// name_blocks / name_scales of its output-major transpose. Returns the names written.
std::vector<std::string> add_mxfp4_expert_tensor(io::SafetensorsWriter& writer, const std::string& name,
                                                 const Tensor& t);

}  // namespace moeserve::testing
