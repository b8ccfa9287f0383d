// The run folder's engine event log (engine_notices.h). A line:
// "<kind>\t<engine>\t<died_ms>\t<why>\n", the reason with its tabs and newlines turned into spaces.
#include "moeserve/cli/engine_notices.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "moeserve/core/error.h"

namespace moeserve::cli {

void EngineEventLogWriter::append(const char* kind, int engine, int64_t died_ms, const std::string& why) {
    std::string reason = why;
    std::replace_if(
        reason.begin(), reason.end(), [](char c) { return c == '\n' || c == '\t' || c == '\r'; }, ' ');
    const std::string line = fmt::format("{}\t{}\t{}\t{}\n", kind, engine, died_ms, reason);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) raise(ErrorCode::kIo, "cannot open the engine event log {}: {}", path_, std::strerror(errno));
    const ssize_t written = ::write(fd, line.data(), line.size());  // one append: never interleaved
    const int saved = errno;
    ::close(fd);
    if (written != static_cast<ssize_t>(line.size()))
        raise(ErrorCode::kIo, "cannot write the engine event log {}: {}", path_, std::strerror(saved));
}

int EngineEventLogReader::replay(EngineNotices& to) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return 0;  // nothing happened yet
    in.seekg(static_cast<std::streamoff>(offset_));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t end = text.rfind('\n');
    if (end == std::string::npos) return 0;
    offset_ += end + 1;  // a line still being written is read next time
    return apply(text.substr(0, end + 1), to, false);
}

void EngineEventLogReader::skip_past(EngineNotices& to) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t end = text.rfind('\n');
    if (end == std::string::npos) return;
    offset_ = end + 1;
    apply(text.substr(0, end + 1), to, true);
}

int EngineEventLogReader::apply(const std::string& text, EngineNotices& to, bool counts_only) {
    int dead = 0;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream fields(line);
        std::string kind, engine_text, died_text, why;
        if (!std::getline(fields, kind, '\t') || !std::getline(fields, engine_text, '\t') ||
            !std::getline(fields, died_text, '\t'))
            continue;
        std::getline(fields, why);
        int engine = 0;
        int64_t died_ms = 0;
        try {
            engine = std::stoi(engine_text);
            died_ms = std::stoll(died_text);
        } catch (const std::logic_error&) {
            continue;
        }
        if (kind == "group_restarted") {
            to.group_restarted();
        } else if (counts_only) {
            continue;
        } else if (kind == "restarting") {
            to.restarting(engine, why, died_ms);
        } else if (kind == "recovering") {
            to.recovering(engine, why, died_ms);
        } else if (kind == "dead") {
            to.dead(engine, why);
            ++dead;
        }
    }
    return dead;
}

}  // namespace moeserve::cli
