// The quantization_config of the int4 checkpoint formats moeserve runs as W4A16 (one place that
// says what each format's config holds and what is refused):
//   compressed-tensors, format pack-quantized: config_groups whose weights are {num_bits 4, type
//     int, strategy group (group_size 32/64/128/...) or channel, symmetric or not}, no input
//     activations (W4A16), no actorder; an ignore list.
//   awq: {bits 4, group_size, zero_point true, version gemm}; modules_to_not_convert.
//   gptq: {bits 4, group_size (-1: per channel), desc_act, sym, checkpoint_format gptq | gptq_v2}.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "moeserve/model/quantization.h"

namespace moeserve::model {

// The Int4Config of quantization_config `qc` when it describes an int4 checkpoint (quant_method
// compressed-tensors with format pack-quantized, awq, gptq), else nullopt. Module names the
// format leaves unquantized are appended to `ignore`. Errors (kUnsupported / kInvalidModel) name
// `label` (config.json) and the field: a num_bits other than 4, a group size that is not a
// positive even number, input activations (W4A8), actorder, AWQ's gemv layout.
std::optional<Int4Config> parse_int4_config(const nlohmann::json& qc, const std::string& label,
                                            std::vector<std::string>& ignore);

// "compressed-tensors pack-quantized", "awq", "gptq": for logs.
const char* int4_layout_name(Int4Layout layout);

}  // namespace moeserve::model
