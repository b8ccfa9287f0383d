// Checkpoint tensors of a Mixtral model (MixtralForCausalLM names), with generator scales.
#pragma once

#include <vector>

#include "moeserve/model/mixtral/config.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

std::vector<WeightSpec> mixtral_weight_specs(const MixtralConfig& c);

}  // namespace moeserve::model
