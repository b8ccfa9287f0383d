// Checkpoint tensors of a Qwen2-MoE model (Qwen2MoeForCausalLM names), with generator scales.
#pragma once

#include <vector>

#include "moeserve/model/qwen2_moe/config.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

std::vector<WeightSpec> qwen2_moe_weight_specs(const Qwen2MoeConfig& c);

}  // namespace moeserve::model
