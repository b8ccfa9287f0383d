// UpstreamCall: one HTTP/1.1 request from this process to another server (the PD proxy's calls
// to prefill and decode instances), with the answer's body handed over piece by piece as it
// arrives, so a stream can be relayed without waiting for its end. Every phase is bounded
// (connect, and each read/write by the idle timeout); cancel() from any thread ends it early.
// One call per object; run() blocks the calling thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace moeserve::serve {

struct UpstreamRequest {
    std::string host;
    int port = 0;
    std::string method = "POST";
    std::string target;  // path and query
    std::string body;    // sent as application/json when non-empty
    std::string authorization;
    int connect_timeout_ms = 5000;
    int idle_timeout_ms = 600000;  // no byte either way for this long fails the call
};

class UpstreamCall {
public:
    UpstreamCall();
    ~UpstreamCall();
    UpstreamCall(const UpstreamCall&) = delete;
    UpstreamCall& operator=(const UpstreamCall&) = delete;

    // Called on run()'s thread: once with the status and Content-Type, then per body piece.
    std::function<void(int status, const std::string& content_type)> on_head;
    std::function<void(std::string_view bytes)> on_body;

    // Runs the request to its end. Returns "" when the whole answer arrived, else what failed
    // ("cannot connect to host:port: ...", "... timed out", "cancelled").
    std::string run(const UpstreamRequest& request);
    // Ends a running (or the next) run() soon with "cancelled". Thread-safe.
    void cancel();
    // Whether on_head ran: the upstream answered (nothing can be retried elsewhere after this).
    bool answered() const { return answered_; }

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    bool answered_ = false;
};

}  // namespace moeserve::serve
