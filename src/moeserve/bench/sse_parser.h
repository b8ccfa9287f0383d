// SseParser: splits a Server-Sent Events byte stream, fed in arbitrary fragments, into the
// payloads of its `data:` lines, as vLLM's benchmark client reads OpenAI streams (line by line).
// No I/O; not thread-safe (one per response).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moeserve::bench {

class SseParser {
public:
    // Appends the payload of every `data:` line completed by `bytes` to *payloads (the text after
    // "data:" and one optional space, trailing whitespace and '\r' removed). Blank lines, comments
    // (":...") and other fields (event:, id:, retry:) are skipped. A line may span any number of
    // feed() calls.
    void feed(std::string_view bytes, std::vector<std::string>* payloads);
    // Delivers a last line that had no newline (a stream closed without one).
    void finish(std::vector<std::string>* payloads);

    // True once a payload "[DONE]" has been delivered.
    bool done() const { return done_; }

private:
    void take_line(std::string_view line, std::vector<std::string>* payloads);

    std::string partial_;  // bytes of the current line not yet ended by '\n'
    bool done_ = false;
};

}  // namespace moeserve::bench
