// gpt-oss's routed experts, stacked per layer in the checkpoint (mlp.experts.*): bf16
// gate_up_proj [E, hidden, 2 x inter] (input-major, gate and up interleaved column by column) and
// down_proj [E, inter, hidden], each with its bias (gate_up_proj_bias [E, 2 x inter],
// down_proj_bias [E, hidden]). They load into the float expert layout (expert-major [2 x inter,
// hidden] gate rows then up rows, and [hidden, inter]) with kernels::ExpertGlu's clamped unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moeserve/io/weight_source.h"
#include "moeserve/model/layers/experts.h"
#include "moeserve/model/layers/moe_block.h"
#include "moeserve/model/quantization.h"

namespace moeserve::model::gpt_oss {

// Tensor names under the layer prefix.
inline constexpr const char* kExperts = "mlp.experts.";
inline constexpr const char* kRouter = "mlp.router";

struct ExpertsShape {
    int64_t num_experts = 0, hidden = 0, inter = 0;
    float swiglu_limit = 7.0f, alpha = 1.702f;
};

// The RoutedExpertsLoader (layers/moe_block.h) of a gpt-oss checkpoint. Errors name the tensor:
// kInvalidModel for a wrong shape, kUnsupported for a --quantization the experts cannot run
// (they run as bf16, f32 under --dtype float32, or as MXFP4 blocks from an MXFP4 checkpoint).
RoutedExpertsLoader routed_experts_loader(const ExpertsShape& shape);

}  // namespace moeserve::model::gpt_oss
