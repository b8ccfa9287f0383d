// The reference backend: every op through the CPU kernels' scalar references (the *_ref
// functions the kernel tests compare against), single-threaded, on host memory. It shows what a
// second backend is (this folder and a register_backend call) and lets a test run a whole model
// through the seam on code with no SIMD and no threads. Not for serving: it is slow.
#pragma once

#include "moeserve/kernels/backend.h"

namespace moeserve::kernels::reference {

const Backend& backend();

}  // namespace moeserve::kernels::reference
