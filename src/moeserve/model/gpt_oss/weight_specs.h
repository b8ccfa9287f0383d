// Checkpoint tensors of a gpt-oss model (GptOssForCausalLM names, bf16 experts), with generator scales.
#pragma once

#include <vector>

#include "moeserve/model/gpt_oss/config.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

std::vector<WeightSpec> gpt_oss_weight_specs(const GptOssConfig& c);

}  // namespace moeserve::model
