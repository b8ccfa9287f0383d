// HTTP/1.1 server on Boost.Beast/Asio: many keep-alive and streaming (SSE,
// chunked) connections on a few threads. Knows nothing of OpenAI: a Handler
// gets each request and answers through a Responder. Protocol-level limits are
// enforced here, before any handler runs: bodies over max_body_bytes get 413,
// headers over max_header_bytes 431, malformed requests 400, and at most
// max_connections connections are open (the rest get 503 and are closed).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/log.h"

namespace moeserve::serve {

struct HttpRequest {
    std::string method;         // "GET", "POST", "HEAD", ...
    std::string target;         // path and query, e.g. "/v1/completions"
    std::string authorization;  // the Authorization header, or empty
    std::string content_type;   // the Content-Type header, or empty
    std::string host;           // the Host header, or empty
    std::string origin;         // the Origin header, or empty
    // Behind a proxy (AccessPolicy decides whether to believe them: --forwarded-allow-ips):
    std::string forwarded_host;  // the X-Forwarded-Host header, or empty
    std::string forwarded_for;   // the X-Forwarded-For header, or empty
    std::string peer_address;    // the connection's remote IP address ("127.0.0.1", "::1")
    int peer_port = 0;           // and port
    std::string body;
};

// How a handler answers one request. Thread-safe: calls are posted to the
// connection's strand, so any thread (an engine-output thread) may call them.
// Exactly one of respond() or start_stream() ... end_stream() per request;
// calls after the client left are dropped.
class Responder {
public:
    virtual ~Responder() = default;
    // For a HEAD request only the head goes out (with the body's Content-Length).
    virtual void respond(int status, std::string content_type, std::string body) = 0;
    // Sends 200 headers for a text/event-stream body (chunked transfer encoding;
    // for an HTTP/1.0 client the raw body, ended by closing the connection).
    virtual void start_stream() = 0;
    virtual void send_chunk(std::string data) = 0;
    virtual void end_stream() = 0;
    // fn runs once, on an I/O thread, if the client disconnects before the answer
    // is complete (streaming or not: the connection is read while a request is
    // answered). Set it before start_stream().
    virtual void on_disconnect(std::function<void()> fn) = 0;
    // The tokens a generation request used, for the access log (access_log.h); call before the
    // answer completes. Other responders ignore it.
    virtual void note_usage(int64_t /*prompt_tokens*/, int64_t /*completion_tokens*/) {}
};

using Handler = std::function<void(HttpRequest request, std::shared_ptr<Responder> responder)>;

// An answer a HeaderCheck gives instead of reading the request on: status and JSON body.
struct HttpError {
    int status = 400;
    std::string body;
};
// Sees a request's method, target and headers (body empty) before its body is read; an error
// is answered at once and the connection closed, the body never read.
using HeaderCheck = std::function<std::optional<HttpError>(const HttpRequest& head)>;

// CORS as vLLM configures it (--allowed-origins, --allowed-methods, --allowed-headers,
// --allow-credentials; defaults "*", "*", "*", false), applied at the HTTP layer as Starlette's
// middleware does: a preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered
// here (200, or 400 naming what is not allowed); every other answer to a request from an allowed
// Origin carries Access-Control-Allow-Origin. Whether a request from some Origin may run at all is
// the handler's policy (routes.h: loopback servers refuse other sites).
struct CorsOptions {
    std::vector<std::string> origins = {"*"};
    std::vector<std::string> methods = {"*"};
    std::vector<std::string> headers = {"*"};
    bool allow_credentials = false;
};

struct HttpServerOptions {
    std::string host = "127.0.0.1";  // an IP address or a name that resolves to one
    int port = 8000;                 // 0 = any free port (see HttpServer::port())
    int num_threads = 1;
    size_t max_body_bytes = 16u << 20;
    size_t max_header_bytes = 64u << 10;
    int idle_timeout_s = 120;  // a connection silent this long between requests is closed
    int max_connections = 0;   // 0 = from the open-file limit (leaving room for other descriptors)
    // A client that reads its stream this far behind (bytes queued, not yet sent)
    // is disconnected.
    size_t max_queued_write_bytes = 8u << 20;
    Logger* logger = nullptr;  // accept failures and connection-limit hits, logged
                               // once per burst
    CorsOptions cors{};
    // HTTPS (vLLM's --ssl-certfile/--ssl-keyfile/--ssl-ca-certs/--ssl-cert-reqs): with a
    // certificate every connection speaks TLS. cert_reqs: 0 = no client certificate asked, 1 =
    // asked and verified if given, 2 = required (against ca_file).
    struct Tls {
        std::string cert_file, key_file, ca_file;
        int cert_reqs = 0;
    } tls{};
    // SO_REUSEPORT on the listening socket: several API server processes listen on the same port
    // and the kernel spreads new connections over them (--api-server-count).
    bool reuse_port = false;
    // Applied before the body is read to every request with a body over 64 KiB or of unknown
    // length (access_policy.h): a client the policy refuses makes the server buffer nothing.
    HeaderCheck header_check{};
    // Bytes of request bodies being received at once, over all connections (each counts its
    // Content-Length, or max_body_bytes when chunked, from its headers until its body is in);
    // a request that would pass it gets 503 and its connection closes. 0 = 16 x max_body_bytes.
    size_t max_body_bytes_in_flight = 0;
};

// host:port bound with SO_REUSEPORT but not listening (so no connection is queued on it): holds
// the port (0 = a free one) for API servers that listen on it with reuse_port. Raises Error(kIo)
// when the bind fails (port in use without SO_REUSEPORT, bad host).
class ReservedPort {
public:
    ReservedPort(const std::string& host, int port);
    ~ReservedPort();
    ReservedPort(const ReservedPort&) = delete;
    ReservedPort& operator=(const ReservedPort&) = delete;
    int port() const { return port_; }

private:
    int fd_ = -1;
    int port_ = 0;
};

// Whether host (as HttpServerOptions::host, resolved the same way) is a
// loopback address. Raises as HttpServer does when it does not resolve.
bool is_loopback_host(const std::string& host);

// A bound, listening server. Create, then run() on the thread that should
// block.
class HttpServer {
public:
    // Resolves host, binds and listens (connections queue until run()); raises
    // Error(kIo) naming host:port when that fails, Error(kInvalidArgument) when
    // host does not resolve.
    HttpServer(HttpServerOptions options, Handler handler);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    int port() const;
    // The limit on open connections in force (max_connections resolved).
    int max_connections() const;
    // Serves on options.num_threads threads (this one included) until stop().
    // Call once.
    void run();
    // Stops every I/O thread; run() returns. Thread-safe.
    void stop();
    // Connections currently open. Thread-safe.
    int num_connections() const;
    // Connections with a request whose answer is not all written to the socket yet (being
    // generated, queued, or being sent); a closed connection owes nothing. Thread-safe.
    int num_unfinished_answers() const;

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace moeserve::serve
