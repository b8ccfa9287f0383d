// Checkpoint tensors of a GLM-4.5 model (Glm4MoeForCausalLM names), with generator scales.
#pragma once

#include <vector>

#include "moeserve/model/glm4_moe/config.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

std::vector<WeightSpec> glm4_moe_weight_specs(const Glm4MoeConfig& c);

}  // namespace moeserve::model
