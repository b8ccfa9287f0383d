// Checkpoint tensors of a DeepSeek-V3/V2 model (DeepseekV3ForCausalLM names), with generator scales.
#pragma once

#include <vector>

#include "moeserve/model/deepseek_v3/config.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

std::vector<WeightSpec> deepseek_v3_weight_specs(const DeepseekV3Config& c);

}  // namespace moeserve::model
