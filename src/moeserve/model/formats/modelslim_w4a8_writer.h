// Writes ModelSlim W4A8_DYNAMIC weights (modelslim_w4a8.h) for `moeserve make-model --quantization
// modelslim-w4a8`: tests and benchmarks get the Ascend W4A8 layout without msModelSlim.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "moeserve/io/safetensors_writer.h"

namespace moeserve::model {

struct ModelSlimW4a8Layout {
    bool packed = true;      // the "1.0.0" saver: two rows per byte (false, or odd rows: one value per byte)
    int64_t group_size = 0;  // 0: one scale per row; else weight_scale_second per group of this many columns
};

// Quantizes w f32 [rows, cols] as msModelSlim's two-stage W4A8 does (a per-row scale absmax / 127,
// then per group the scaled values' absmax / 7; per row alone: absmax / 7), symmetric, round half
// to even, clamped to [-8, 7]; writes PREFIX.weight, weight_scale, weight_offset (zeros), per group
// weight_scale_second and weight_offset_second (zeros), and scale_bias (8 * the dequantized row
// sum, as the saver writes it for the NPU kernel). Every name goes into desc as W4A8_DYNAMIC.
// Returns the names written.
std::vector<std::string> add_modelslim_w4a8(io::SafetensorsWriter& writer, const std::string& prefix, const float* w,
                                            int64_t rows, int64_t cols, const ModelSlimW4a8Layout& layout,
                                            nlohmann::json& desc);

}  // namespace moeserve::model
