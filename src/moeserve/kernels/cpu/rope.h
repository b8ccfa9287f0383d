// Rotary position embedding on the CPU (the arguments and styles: kernels/rope_types.h).
#pragma once

#include "moeserve/kernels/rope_types.h"

namespace moeserve::kernels::cpu {

void apply_rope(const RopeArgs& args);
void apply_rope_ref(const RopeArgs& args);

}  // namespace moeserve::kernels::cpu
