// HTTP/1.1 server on Boost.Beast/Asio: many keep-alive and streaming (SSE, chunked) connections
// on a few threads. Knows nothing of OpenAI: a Handler gets each request and answers through a
// Responder. Bodies over max_body_bytes get 413 without reaching the handler.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace moeserve::serve {

struct HttpRequest {
    std::string method;         // "GET", "POST", ...
    std::string target;         // path and query, e.g. "/v1/completions"
    std::string authorization;  // the Authorization header, or empty
    std::string body;
};

// How a handler answers one request. Thread-safe: calls are posted to the connection's strand,
// so any thread (an engine-output thread) may call them. Exactly one of respond() or
// start_stream() ... end_stream() per request; calls after the client left are dropped.
class Responder {
public:
    virtual ~Responder() = default;
    virtual void respond(int status, std::string content_type, std::string body) = 0;
    // Sends 200 headers for a text/event-stream body (chunked transfer encoding).
    virtual void start_stream() = 0;
    virtual void send_chunk(std::string data) = 0;
    virtual void end_stream() = 0;
    // fn runs once, on an I/O thread, if the client disconnects before the answer is complete.
    // Set it before start_stream().
    virtual void on_disconnect(std::function<void()> fn) = 0;
};

using Handler = std::function<void(HttpRequest request, std::shared_ptr<Responder> responder)>;

struct HttpServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;  // 0 = any free port (see HttpServer::port())
    int num_threads = 1;
    size_t max_body_bytes = 16u << 20;
    int idle_timeout_s = 120;  // a connection silent this long between requests is closed
};

// A bound, listening server. Create, then run() on the thread that should block.
class HttpServer {
public:
    // Binds and listens; raises Error(kIo) naming host:port when that fails.
    HttpServer(HttpServerOptions options, Handler handler);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    int port() const;
    // Serves on options.num_threads threads (this one included) until stop(). Call once.
    void run();
    // Closes the listening socket; open connections go on. Thread-safe.
    void stop_accepting();
    // Stops every I/O thread; run() returns. Thread-safe.
    void stop();
    // Connections currently open. Thread-safe.
    int num_connections() const;

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace moeserve::serve
