// --enable-eplb and --eplb-config (vLLM's names and JSON fields) -> model::EplbConfig.
#pragma once

#include <string>

#include "moeserve/model/eplb/eplb_config.h"

namespace moeserve::cli {

// The config of these flags (enabled false without --enable-eplb). Error kInvalidArgument as one
// line naming the flag: --eplb-config without --enable-eplb, not a JSON object, an unknown field,
// window_size / step_interval not an integer >= 1, num_redundant_experts not an integer >= 0,
// log_balancedness not a boolean.
model::EplbConfig parse_eplb_flags(bool enable_eplb, const std::string& eplb_config);

}  // namespace moeserve::cli
