// The access log (on by default, as uvicorn's under vLLM; --disable-uvicorn-access-log turns it
// off): one line per answered request, written when its answer is complete, with what an operator
// greps for: who, method and target, status, latency, and the tokens a generation request used.
// Requests refused from their headers alone (HttpServerOptions::header_check) and CORS preflights
// are answered by the HTTP server before any route and are not logged.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "moeserve/core/log.h"
#include "moeserve/serve/http_server.h"

namespace moeserve::serve {

// '127.0.0.1:51234 - "POST /v1/completions" 200 0.153s prompt_tokens=5 completion_tokens=16'
// (the token fields only when known). Pure formatting.
std::string access_log_line(const std::string& client, const std::string& method, const std::string& target, int status,
                            double seconds, std::optional<std::pair<int64_t, int64_t>> usage);

// A Responder that passes every call on to `inner` and writes the access line when the answer
// completes (respond(), or end_stream() of a stream). Thread-safe as Responder is.
class AccessLogResponder : public Responder {
public:
    // logger must outlive this (the server's; responders die with the requests they answer).
    AccessLogResponder(std::shared_ptr<Responder> inner, const HttpRequest& request, std::string client,
                       Logger& logger);

    void respond(int status, std::string content_type, std::string body) override;
    void start_stream() override;
    void send_chunk(std::string data) override;
    void end_stream() override;
    void on_disconnect(std::function<void()> fn) override;
    void note_usage(int64_t prompt_tokens, int64_t completion_tokens) override;

private:
    void write_line(int status);

    std::shared_ptr<Responder> inner_;
    std::string method_, target_, client_;
    Logger& logger_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    std::mutex mutex_;
    std::optional<std::pair<int64_t, int64_t>> usage_;
    bool written_ = false;
};

}  // namespace moeserve::serve
