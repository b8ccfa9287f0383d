// StreamReader: turns the SSE body of one streaming OpenAI response into a RequestOutput, with
// the chunk rules of vLLM's backend_request_func.py:
//   - a content chunk is a `data:` JSON with a non-empty "choices" array (completions: any such
//     chunk, even with empty text, as vLLM counts special tokens; chat: one whose delta carries
//     non-empty "content" or "reasoning_content", so a role-only opening chunk sent before the
//     first token is not mistaken for it);
//   - TTFT = arrival of the first content chunk - send time; each later content chunk appends
//     its gap to the previous one to ITL; E2EL = arrival of the last content chunk (completions)
//     or of the last chunk of any kind (chat, as vLLM) - send time;
//   - usage.completion_tokens, when a chunk carries it, is the output token count;
//   - a chunk {"error": ...} or a stream without any content chunk fails the request.
// No I/O; not thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "moeserve/bench/report.h"
#include "moeserve/bench/serve_bench.h"
#include "moeserve/bench/sse_parser.h"

namespace moeserve::bench {

class StreamReader {
public:
    using TimePoint = std::chrono::steady_clock::time_point;

    StreamReader(Backend backend, TimePoint start) : backend_(backend), start_(start) {}

    // Body bytes that arrived at `now` (any fragmentation).
    void feed(std::string_view bytes, TimePoint now);
    // Ends the stream and writes the result into *out (success, ttft, itl, latency, text, usage,
    // error). prompt_len is left as it is.
    void finish(RequestOutput& out);

private:
    void take(const std::string& payload, TimePoint now);

    Backend backend_;
    TimePoint start_;
    SseParser sse_;
    std::vector<std::string> payloads_;
    bool got_content_ = false;
    TimePoint last_content_{};
    TimePoint last_any_{};
    double ttft_s_ = 0.0;
    std::vector<double> itl_s_;
    std::string text_;
    std::optional<int64_t> output_tokens_;
    std::string error_;
};

}  // namespace moeserve::bench
