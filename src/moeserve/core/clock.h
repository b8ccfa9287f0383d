// Seconds on the monotonic clock, for durations inside one process (queue times, latencies).
#pragma once

#include <chrono>

namespace moeserve {

inline double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace moeserve
