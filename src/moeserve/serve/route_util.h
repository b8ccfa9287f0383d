// Helpers the route files share (routes.cpp: dispatch and access; generate_route.cpp: the
// generation lifecycle).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "moeserve/core/clock.h"

namespace moeserve::serve {

inline constexpr const char* kJsonMediaType = "application/json";

inline int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Compact JSON; invalid UTF-8 in strings becomes U+FFFD instead of an exception.
inline std::string dump(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace moeserve::serve
