#include "moeserve/core/log.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdarg>
#include <ctime>

#include "moeserve/core/error.h"

namespace moeserve {

LogLevel parse_log_level(const std::string& name) {
    std::string s = name;
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    if (s == "debug") return LogLevel::kDebug;
    if (s == "info") return LogLevel::kInfo;
    if (s == "warning" || s == "warn") return LogLevel::kWarn;
    if (s == "error" || s == "critical") return LogLevel::kError;
    raise(ErrorCode::kInvalidArgument, "log level must be debug, info, warning or error; got '{}'", name);
}

Logger::Logger(std::string prefix, LogLevel min_level, FILE* out)
    : prefix_(std::move(prefix)), min_level_(min_level), out_(out) {}

void Logger::log(LogLevel level, const char* component, const char* format, ...) {
    static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
    // Most lines fit the stack buffer; a longer one (a logged prompt) is formatted again into a
    // string of its size rather than cut.
    char buf[2048];
    std::string long_msg;
    va_list args;
    va_start(args, format);
    va_list again;
    va_copy(again, args);
    const int n = std::vsnprintf(buf, sizeof buf, format, args);
    va_end(args);
    const char* msg = buf;
    if (n >= static_cast<int>(sizeof buf)) {
        long_msg.resize(static_cast<size_t>(n) + 1);
        std::vsnprintf(long_msg.data(), long_msg.size(), format, again);
        msg = long_msg.c_str();
    }
    va_end(again);

    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    localtime_r(&t, &tm);

    std::lock_guard<std::mutex> lock(mutex_);
    std::fprintf(out_, "%c %02d:%02d:%02d.%03d %s%s%s%s: %s\n", kLetters[static_cast<int>(level)], tm.tm_hour,
                 tm.tm_min, tm.tm_sec, static_cast<int>(ms), prefix_.empty() ? "" : "[", prefix_.c_str(),
                 prefix_.empty() ? "" : "] ", component, msg);
    std::fflush(out_);
}

}  // namespace moeserve
