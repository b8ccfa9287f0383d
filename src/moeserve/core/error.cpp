#include "moeserve/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace moeserve {

const char* error_code_name(ErrorCode code) {
    switch (code) {
        case ErrorCode::kInvalidArgument:
            return "invalid_argument";
        case ErrorCode::kNotFound:
            return "not_found";
        case ErrorCode::kInvalidModel:
            return "invalid_model";
        case ErrorCode::kUnsupported:
            return "unsupported";
        case ErrorCode::kIo:
            return "io_error";
        case ErrorCode::kUnavailable:
            return "unavailable";
        case ErrorCode::kInternal:
            return "internal";
    }
    return "unknown";
}

namespace detail {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
    std::fprintf(stderr, "F %s:%d: check failed: %s: %s\n", file, line, cond, msg.c_str());
    std::fflush(stderr);
    std::abort();
}
}  // namespace detail

}  // namespace moeserve
