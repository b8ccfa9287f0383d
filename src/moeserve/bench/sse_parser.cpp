// SSE line splitting for the benchmark client: tolerant of fragmentation anywhere, CRLF and LF.
#include "moeserve/bench/sse_parser.h"

namespace moeserve::bench {

namespace {

std::string_view strip(std::string_view s) {
    const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

}  // namespace

void SseParser::feed(std::string_view bytes, std::vector<std::string>* payloads) {
    while (!bytes.empty()) {
        const size_t nl = bytes.find('\n');
        if (nl == std::string_view::npos) {
            partial_.append(bytes);
            return;
        }
        if (partial_.empty()) {
            take_line(bytes.substr(0, nl), payloads);
        } else {
            partial_.append(bytes.substr(0, nl));
            take_line(partial_, payloads);
            partial_.clear();
        }
        bytes.remove_prefix(nl + 1);
    }
}

void SseParser::finish(std::vector<std::string>* payloads) {
    if (!partial_.empty()) take_line(partial_, payloads);
    partial_.clear();
}

void SseParser::take_line(std::string_view line, std::vector<std::string>* payloads) {
    line = strip(line);
    constexpr std::string_view kData = "data:";
    if (line.substr(0, kData.size()) != kData) return;  // blank, comment or another field
    line.remove_prefix(kData.size());
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line == "[DONE]") done_ = true;
    payloads->emplace_back(line);
}

}  // namespace moeserve::bench
