// A spin-wait hint: tells the core that this thread is polling (on x86 the PAUSE instruction,
// which frees the sibling hyper-thread and avoids a memory-order flush on exit). A builtin, not
// an intrinsics header: those stay in kernels/ (tools/check_layering.py).
#pragma once

namespace moeserve {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

}  // namespace moeserve
