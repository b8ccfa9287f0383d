// The CPU backend: the kernels of this folder behind the ops table (kernels/ops.h), at the ISA
// level isa.h picks, on host memory.
#pragma once

#include "moeserve/kernels/backend.h"

namespace moeserve::kernels::cpu {

const Backend& backend();

}  // namespace moeserve::kernels::cpu
