// Checkpoint tensors of a Qwen3-MoE model (Qwen3MoeForCausalLM names), with generator scales.
#pragma once

#include <vector>

#include "moeserve/model/qwen3_moe/config.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

std::vector<WeightSpec> qwen3_moe_weight_specs(const Qwen3MoeConfig& c);

}  // namespace moeserve::model
