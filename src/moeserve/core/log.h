// Logger: one line per event, "I 12:00:01.234 [dp1 tp0] engine: message". A rank owns one and
// passes it down (no global logger). Thread-safe. Depends on std only.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

namespace moeserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Parses "debug" | "info" | "warning" | "warn" | "error" (case-insensitive); throws Error otherwise.
LogLevel parse_log_level(const std::string& name);

class Logger {
public:
    // prefix: e.g. "dp1 tp0" or "api"; empty for none. Lines go to `out` (stderr by default).
    explicit Logger(std::string prefix = "", LogLevel min_level = LogLevel::kInfo, FILE* out = stderr);

    bool enabled(LogLevel level) const { return level >= min_level_; }
    void set_level(LogLevel level) { min_level_ = level; }
    LogLevel level() const { return min_level_; }
    const std::string& prefix() const { return prefix_; }

    void log(LogLevel level, const char* component, const char* format, ...) __attribute__((format(printf, 4, 5)));

private:
    std::string prefix_;
    LogLevel min_level_;
    FILE* out_;
    std::mutex mutex_;
};

}  // namespace moeserve

#define MOESERVE_LOG(logger, level, component, ...)                               \
    do {                                                                          \
        if ((logger).enabled(level)) (logger).log(level, component, __VA_ARGS__); \
    } while (0)
#define MOESERVE_LOG_D(logger, component, ...) \
    MOESERVE_LOG(logger, ::moeserve::LogLevel::kDebug, component, __VA_ARGS__)
#define MOESERVE_LOG_I(logger, component, ...) MOESERVE_LOG(logger, ::moeserve::LogLevel::kInfo, component, __VA_ARGS__)
#define MOESERVE_LOG_W(logger, component, ...) MOESERVE_LOG(logger, ::moeserve::LogLevel::kWarn, component, __VA_ARGS__)
#define MOESERVE_LOG_E(logger, component, ...) \
    MOESERVE_LOG(logger, ::moeserve::LogLevel::kError, component, __VA_ARGS__)
