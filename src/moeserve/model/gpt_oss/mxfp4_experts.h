// gpt-oss's experts as its released checkpoints hold them (quant_method mxfp4): per layer
// mlp.experts.gate_up_proj_blocks [E, 2 x inter, hidden / 32, 16] + _scales [E, 2 x inter,
// hidden / 32] (output-major, gate and up rows interleaved) and down_proj_blocks [E, hidden,
// inter / 32, 16] + _scales. They become GGUF MXFP4 rows (formats/mxfp4_hf.h: the same bytes,
// reordered) that the GGUF expert kernels run in place, or, under --quantization none, weights
// widened to bf16 (f32 under --dtype float32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moeserve/io/weight_source.h"
#include "moeserve/model/gpt_oss/experts.h"
#include "moeserve/model/layers/experts.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model::gpt_oss {

// Whether the layer under prefix (".../mlp.experts.") holds MXFP4 experts.
bool has_mxfp4_experts(const io::WeightSource& weights, const std::string& prefix);

// Experts ids (global), keeping intermediate rows [inter_begin, +inter) of gate/up and the same
// columns of down (tensor parallelism: whole 32-column blocks only, kUnsupported otherwise).
// Errors name the tensor: kInvalidModel for a dtype or shape other than the above.
ExpertWeights load_mxfp4_experts(const io::WeightSource& weights, const std::string& prefix, const ExpertsShape& shape,
                                 int64_t inter_begin, int64_t inter, const std::vector<int64_t>& ids, int64_t first_id,
                                 const Quantization& quant);

}  // namespace moeserve::model::gpt_oss
