// Errors: user-caused problems are moeserve::Error (caught at the CLI, HTTP and engine-step
// boundaries); broken invariants are MOESERVE_CHECK, which prints the evidence and aborts.
// Depends on std and fmt only.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace moeserve {

enum class ErrorCode {
    kInvalidArgument,  // a flag, request field or parameter is out of range or malformed
    kNotFound,         // a file, tensor, model or route does not exist
    kInvalidModel,     // a model directory or checkpoint file is malformed
    kUnsupported,      // a feature, dtype, model_type or template construct we do not implement
    kIo,               // an operating-system call failed
    kUnavailable,      // a peer (rank, engine) is gone or timed out
    kInternal,         // should not happen; a bug
};

const char* error_code_name(ErrorCode code);

// The one exception type of the project. The message is a full sentence for the user:
// what was wrong, where, expected vs got, and what to do.
class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    ErrorCode code() const { return code_; }

private:
    ErrorCode code_;
};

// Throws Error{code, fmt::format(fmt, args...)}.
template <typename... Args>
[[noreturn]] void raise(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
    throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace moeserve

// Always-on invariant check: MOESERVE_CHECK(n > 0, "n={} rows={}", n, rows).
#define MOESERVE_CHECK(cond, ...)                                                                    \
    do {                                                                                             \
        if (__builtin_expect(!(cond), 0)) {                                                          \
            ::moeserve::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
        }                                                                                            \
    } while (0)

#ifdef NDEBUG
#define MOESERVE_DCHECK(cond, ...) \
    do {                           \
    } while (0)
#else
#define MOESERVE_DCHECK(cond, ...) MOESERVE_CHECK(cond, __VA_ARGS__)
#endif
