// Beast implementation of HttpServer: one Session per connection on its own
// strand; responses and SSE chunks go through a write queue so any thread may
// answer (each request's Responder is an Exchange that posts to the strand and
// is ignored once its request is over). While a request is being answered,
// streaming or not, the next request is already being read, so a client that
// closes its socket is noticed at once and its request aborted.
//
// The write queue owns the bytes of the write in flight: close() never frees
// them (the completion handler does), which is what a disconnect storm used to
// get wrong (double free). With a certificate (HttpServerOptions::tls) each
// connection runs the same session over TLS.
#include "moeserve/serve/http_server.h"

#include <utility>  // boost 1.74 asio/awaitable.hpp misses it under C++20

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fcntl.h>
#include <sys/socket.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "moeserve/core/error.h"

namespace moeserve::serve {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const char* reason_phrase(int status) {
    if (status == 431) return "Request Header Fields Too Large";  // unknown to boost 1.74
    return http::obsolete_reason(static_cast<http::status>(status)).data();
}

// extra: more header lines, each ending in \r\n (CORS).
std::string response_head(int status, const std::string& content_type, size_t content_length, bool keep_alive,
                          const std::string& extra = "") {
    return fmt::format(
        "HTTP/1.1 {} {}\r\nServer: moeserve\r\nContent-Type: {}\r\n"
        "Content-Length: {}\r\nConnection: {}\r\n{}\r\n",
        status, reason_phrase(status), content_type, content_length, keep_alive ? "keep-alive" : "close", extra);
}

bool listed(const std::vector<std::string>& list, const std::string& value) {
    for (const auto& v : list) {
        if (v == "*" || beast::iequals(v, value)) return true;
    }
    return false;
}

bool lists_any(const std::vector<std::string>& list) { return std::find(list.begin(), list.end(), "*") != list.end(); }

std::string join(const std::vector<std::string>& list) {
    std::string out;
    for (const auto& v : list) out += (out.empty() ? "" : ", ") + v;
    return out;
}

// The CORS header lines of an answer to a request from `origin` (empty: none).
std::string cors_headers(const CorsOptions& cors, const std::string& origin) {
    if (origin.empty() || !listed(cors.origins, origin)) return "";
    std::string out;
    if (lists_any(cors.origins) && !cors.allow_credentials) {
        out = "Access-Control-Allow-Origin: *\r\n";
    } else {  // the origin itself: the answer differs by Origin
        out = "Access-Control-Allow-Origin: " + origin + "\r\nVary: Origin\r\n";
    }
    if (cors.allow_credentials) out += "Access-Control-Allow-Credentials: true\r\n";
    return out;
}

// The answer to a CORS preflight, as Starlette's CORSMiddleware gives it.
std::string preflight_response(const CorsOptions& cors, const std::string& origin, const std::string& method,
                               const std::string& request_headers, bool keep_alive) {
    std::vector<std::string> failures;
    if (!listed(cors.origins, origin)) failures.push_back("origin");
    if (!listed(cors.methods, method)) failures.push_back("method");
    if (!lists_any(cors.headers) && !request_headers.empty()) {
        size_t begin = 0;
        while (begin < request_headers.size()) {
            size_t end = request_headers.find(',', begin);
            if (end == std::string::npos) end = request_headers.size();
            std::string h = request_headers.substr(begin, end - begin);
            h.erase(0, h.find_first_not_of(" \t"));
            h.erase(h.find_last_not_of(" \t") + 1);
            if (!h.empty() && !listed(cors.headers, h)) {
                failures.push_back("headers");
                break;
            }
            begin = end + 1;
        }
    }
    if (!failures.empty()) {
        std::string body = "Disallowed CORS " + failures.front();
        for (size_t i = 1; i < failures.size(); ++i) body += ", " + failures[i];
        return response_head(400, "text/plain; charset=utf-8", body.size(), keep_alive) + body;
    }
    std::string extra = cors_headers(cors, origin);
    if (extra.empty()) extra = "Access-Control-Allow-Origin: " + origin + "\r\nVary: Origin\r\n";
    extra +=
        "Access-Control-Allow-Methods: " +
        (lists_any(cors.methods) ? std::string("DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT") : join(cors.methods)) +
        "\r\n";
    const std::string allowed_headers = lists_any(cors.headers) ? request_headers : join(cors.headers);
    if (!allowed_headers.empty()) extra += "Access-Control-Allow-Headers: " + allowed_headers + "\r\n";
    extra += "Access-Control-Max-Age: 600\r\n";
    const std::string body = "OK";
    return response_head(200, "text/plain; charset=utf-8", body.size(), keep_alive, extra) + body;
}

std::string error_json(const std::string& message, const char* code) {
    return fmt::format(R"({{"error":{{"message":"{}","type":"invalid_request_error","param":null,"code":"{}"}}}})",
                       message, code);
}

// A whole answer that ends the connection (protocol errors, the connection
// limit).
std::string closing_response(int status, const std::string& message, const char* code) {
    const std::string body = error_json(message, code);
    return response_head(status, "application/json", body.size(), false) + body;
}

std::string header(const http::request<http::string_body>& request, http::field field) {
    const auto it = request.find(field);
    return it == request.end() ? std::string() : std::string(it->value());
}

std::string header(const http::request<http::string_body>& request, std::string_view name) {
    const auto it = request.find(beast::string_view(name.data(), name.size()));
    return it == request.end() ? std::string() : std::string(it->value());
}

// The request's method, target and the headers a Handler sees, and who sent it; no body.
HttpRequest request_head(const http::request<http::string_body>& request, const tcp::endpoint& peer) {
    HttpRequest r;
    r.peer_address = peer.address().to_string();
    r.peer_port = peer.port();
    r.forwarded_host = header(request, "X-Forwarded-Host");  // no http::field for these two
    r.forwarded_for = header(request, "X-Forwarded-For");
    r.method = std::string(request.method_string());
    r.target = std::string(request.target());
    r.authorization = header(request, http::field::authorization);
    r.content_type = header(request, http::field::content_type);
    r.host = header(request, http::field::host);
    r.origin = header(request, http::field::origin);
    return r;
}

class Session : public std::enable_shared_from_this<Session> {
public:
    // tls: the server's TLS context (null: plain HTTP); it outlives the session.
    Session(tcp::socket socket, const HttpServerOptions& options, const Handler& handler, std::atomic<int>& counter,
            std::atomic<size_t>& body_bytes, std::atomic<int>& owing_sessions, net::ssl::context* tls)
        : socket_(std::move(socket)),
          idle_timer_(socket_.get_executor()),
          write_timer_(socket_.get_executor()),
          probe_timer_(socket_.get_executor()),
          options_(options),
          handler_(handler),
          counter_(counter),
          body_bytes_(body_bytes),
          owing_sessions_(owing_sessions) {
        ++counter_;
        beast::error_code ec;
        peer_ = socket_.remote_endpoint(ec);  // a connection already reset keeps the empty endpoint
        if (tls) tls_.emplace(socket_, *tls);
    }
    ~Session() {
        release_body();
        set_owes_answer(false);
        --counter_;
    }

    void start() {
        net::dispatch(socket_.get_executor(), [self = shared_from_this()] {
            self->arm_idle_timer();  // also bounds the TLS handshake
            if (!self->tls_) return self->read_next();
            self->tls_->async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
                if (ec) return self->close();
                self->read_next();
            });
        });
    }

    // The Responder calls of request `generation`, on the strand.
    void respond(uint64_t generation, int status, const std::string& content_type, const std::string& body) {
        if (!current(generation) || answered_) return;
        answered_ = true;
        busy_ = false;
        std::string bytes = response_head(status, content_type, body.size(), keep_alive_, cors_);
        if (!head_request_) bytes += body;
        enqueue(std::move(bytes));
        after_answer();
    }

    void start_stream(uint64_t generation) {
        if (!current(generation) || answered_ || streaming_) return;
        streaming_ = true;
        if (http10_) {  // no chunked encoding in HTTP/1.0: the body ends when the
                        // connection does
            keep_alive_ = false;
            enqueue(
                "HTTP/1.1 200 OK\r\nServer: moeserve\r\nContent-Type: "
                "text/event-stream\r\n"
                "Cache-Control: no-cache\r\nConnection: close\r\n" +
                cors_ + "\r\n");
            return;
        }
        enqueue(
            fmt::format("HTTP/1.1 200 OK\r\nServer: moeserve\r\nContent-Type: "
                        "text/event-stream\r\n"
                        "Cache-Control: no-cache\r\nTransfer-Encoding: "
                        "chunked\r\nConnection: {}\r\n{}\r\n",
                        keep_alive_ ? "keep-alive" : "close", cors_));
    }

    void send_chunk(uint64_t generation, std::string data) {
        if (!current(generation) || !streaming_ || answered_ || data.empty()) return;
        enqueue(http10_ ? std::move(data) : fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
    }

    void end_stream(uint64_t generation) {
        if (!current(generation) || !streaming_ || answered_) return;
        answered_ = true;
        busy_ = false;
        if (!http10_) enqueue("0\r\n\r\n");
        after_answer();
    }

    void on_disconnect(uint64_t generation, std::function<void()> fn) {
        if (!current(generation)) return;
        if (closed_) {
            if (!answered_ && fn) fn();
            return;
        }
        disconnect_fn_ = std::move(fn);
    }

    net::any_io_executor executor() { return socket_.get_executor(); }

private:
    bool current(uint64_t generation) const { return generation == generation_ && busy_; }

    void arm_idle_timer() {
        idle_timer_.expires_after(std::chrono::seconds(options_.idle_timeout_s));
        idle_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
            if (!ec && !self->busy_) self->close();  // not cancelled, and still idle
        });
    }

    void read_next() {
        if (closed_ || reading_ || pending_ || pending_error_ || close_after_write_) return;
        reading_ = true;
        parser_.emplace();
        parser_->body_limit(options_.max_body_bytes);
        parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
        with_stream([&](auto& stream) {
            http::async_read_header(stream, buffer_, *parser_,
                                    [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
        });
    }

    void on_header(beast::error_code ec) {
        if (ec) return on_read_failed(ec);
        const auto& r = parser_->get();
        // A body follows: who asks, and is there room, before it is read. A small body is read
        // anyway (the handler applies the same policy): closing with unread bytes would reset the
        // connection, and an ordinary client with a wrong key could lose its 401.
        constexpr uint64_t kSmallBody = 64 * 1024;
        if (!parser_->is_done()) {
            const bool small = parser_->content_length() && *parser_->content_length() <= kSmallBody;
            if (options_.header_check && !small) {
                if (auto refused = options_.header_check(request_head(r, peer_))) return refuse(*refused);
            }
            if (!reserve_body(parser_->content_length().value_or(options_.max_body_bytes))) {
                return refuse({503, error_json("The server is receiving too many request bodies at once; retry later.",
                                               "too_many_request_bodies")});
            }
        }
        if (!busy_ && r.version() >= 11 && beast::iequals(header(r, http::field::expect), "100-continue")) {
            enqueue("HTTP/1.1 100 Continue\r\n\r\n");
        }
        if (parser_->is_done()) return on_request();
        with_stream([&](auto& stream) {
            http::async_read(stream, buffer_, *parser_, [self = shared_from_this()](beast::error_code e, size_t) {
                if (e) return self->on_read_failed(e);
                self->on_request();
            });
        });
    }

    void on_request() {
        reading_ = false;
        release_body();
        auto request = parser_->release();
        if (busy_) {  // pipelined while answering: answered in order afterwards
            pending_.emplace(std::move(request));
            return;
        }
        dispatch(std::move(request));
    }

    void on_read_failed(beast::error_code ec) {
        reading_ = false;
        release_body();
        if (closed_) return;
        if (ec == http::error::body_limit) {
            return fail_protocol(413, fmt::format("The request body is larger than {} bytes.", options_.max_body_bytes),
                                 "request_too_large");
        }
        if (ec == http::error::header_limit) {
            return fail_protocol(
                431, fmt::format("The request headers are larger than {} bytes.", options_.max_header_bytes),
                "request_header_fields_too_large");
        }
        if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
            ec != http::error::end_of_stream && ec != http::error::partial_message) {
            return fail_protocol(400, "Malformed HTTP request: " + ec.message(), "bad_request");
        }
        if (ec == http::error::end_of_stream && busy_ && !answered_ && !http10_) return on_peer_done_sending();
        close();  // end of stream, reset, or aborted by close()
    }

    // The client shut down its sending side after its request (shutdown(SHUT_WR)) and may still
    // read: it is answered, then the connection closes. A client that closed completely looks
    // the same until a write to it fails, so a probe goes out at once, again after 100 ms, then
    // each second: before the answer starts an interim "100 Continue" (HTTP/1.1 clients skip 1xx
    // responses they did not ask for), in a started stream an SSE comment line (which SSE
    // clients skip). A vanished client answers the first with a reset, so the second fails,
    // which closes the session and aborts its request at once, as before (a queued request must
    // not wait for its first token to find out). HTTP/1.0 has neither: there the end of the
    // client's stream stays a disconnect.
    void on_peer_done_sending() {
        keep_alive_ = false;  // the answer says "Connection: close": nothing more can arrive
        probe_peer(0);
    }

    void probe_peer(int round) {
        if (closed_ || !busy_ || answered_) return;
        enqueue(streaming_ ? std::string("3\r\n:\n\n\r\n") : std::string("HTTP/1.1 100 Continue\r\n\r\n"));
        probe_timer_.expires_after(std::chrono::milliseconds(round == 0 ? 100 : 1000));
        probe_timer_.async_wait([self = shared_from_this(), round](beast::error_code ec) {
            if (!ec) self->probe_peer(round + 1);
        });
    }

    // A request that cannot be read: answer it (after the answer in progress, if
    // any), then close.
    void fail_protocol(int status, const std::string& message, const char* code) {
        fail_with(closing_response(status, message, code));
    }

    // A request refused from its headers (HeaderCheck, or no room for its body): answered
    // without reading the body, then the connection closes.
    void refuse(const HttpError& error) {
        reading_ = false;
        release_body();
        fail_with(response_head(error.status, "application/json", error.body.size(), false) + error.body);
    }

    // Counts a body about to be received against max_body_bytes_in_flight; false if it would
    // pass it.
    bool reserve_body(size_t bytes) {
        const size_t cap =
            options_.max_body_bytes_in_flight > 0 ? options_.max_body_bytes_in_flight : 16 * options_.max_body_bytes;
        if (body_bytes_.fetch_add(bytes) + bytes > cap) {
            body_bytes_.fetch_sub(bytes);
            return false;
        }
        reserved_body_bytes_ = bytes;
        return true;
    }

    void release_body() { body_bytes_.fetch_sub(std::exchange(reserved_body_bytes_, 0)); }

    void fail_with(std::string bytes) {
        if (busy_) {
            pending_error_ = std::move(bytes);
            return;
        }
        enqueue(std::move(bytes));
        close_when_written();
    }

    void dispatch(http::request<http::string_body> request) {
        ++generation_;
        busy_ = true;
        set_owes_answer(true);
        answered_ = false;
        streaming_ = false;
        disconnect_fn_ = nullptr;
        idle_timer_.cancel();
        keep_alive_ = request.keep_alive();
        http10_ = request.version() < 11;
        head_request_ = request.method() == http::verb::head;
        HttpRequest r = request_head(request, peer_);
        cors_ = cors_headers(options_.cors, r.origin);
        const std::string preflight_method = header(request, http::field::access_control_request_method);
        if (request.method() == http::verb::options && !r.origin.empty() && !preflight_method.empty()) {
            answered_ = true;  // answered here: the handler never sees a preflight
            busy_ = false;
            enqueue(preflight_response(options_.cors, r.origin, preflight_method,
                                       header(request, http::field::access_control_request_headers), keep_alive_));
            after_answer();
            return;
        }
        r.body = std::move(request.body());
        handler_(std::move(r), make_exchange());
        read_next();  // the next request, or the end of the connection while this
                      // one is answered
    }

    std::shared_ptr<Responder> make_exchange();

    // After a complete answer: a deferred protocol error, the pipelined request,
    // or read on.
    void after_answer() {
        streaming_ = false;
        disconnect_fn_ = nullptr;
        // The client left before its answer came (a queued request whose client hung up): nothing
        // more to read or write. Arming the idle timer here would keep this closed session, and
        // its --max-connections slot, alive for idle_timeout_s.
        if (closed_) return;
        if (pending_error_) {
            enqueue(std::move(*pending_error_));
            pending_error_.reset();
            return close_when_written();
        }
        if (!keep_alive_) return close_when_written();
        if (pending_) {
            auto next = std::move(*pending_);
            pending_.reset();
            return dispatch(std::move(next));
        }
        arm_idle_timer();
        read_next();
    }

    void close_when_written() {
        close_after_write_ = true;
        if (!writing_) close();
    }

    void enqueue(std::string bytes) {
        if (closed_) return;
        queued_bytes_ += bytes.size();
        writes_.push_back(std::move(bytes));
        if (!writing_) return write_front();
        if (queued_bytes_ - writes_.front().size() > options_.max_queued_write_bytes) close();  // a reader far behind
    }

    void write_front() {
        writing_ = true;
        write_timer_.expires_after(std::chrono::seconds(options_.idle_timeout_s));
        write_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
            if (!ec && self->writing_) self->close();  // no progress for idle_timeout_s
        });
        with_stream([&](auto& stream) {
            net::async_write(stream, net::buffer(writes_.front()),
                             [self = shared_from_this()](beast::error_code ec, size_t) { self->on_written(ec); });
        });
    }

    void on_written(beast::error_code ec) {
        writing_ = false;
        write_timer_.cancel();
        queued_bytes_ -= writes_.front().size();
        writes_.pop_front();
        if (closed_) {
            writes_.clear();
            return;
        }
        if (ec) return close();
        if (!writes_.empty()) return write_front();
        if (!busy_) set_owes_answer(false);  // the last answer's bytes are all sent
        if (close_after_write_) close();
    }

    // Whether a request of this connection has come in whose answer is not all sent: the server
    // counts such connections (HttpServer::num_unfinished_answers) so a drain can wait for them.
    void set_owes_answer(bool owes) {
        if (owes == owes_answer_) return;
        owes_answer_ = owes;
        owing_sessions_ += owes ? 1 : -1;
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        idle_timer_.cancel();
        probe_timer_.cancel();
        if (!writing_) {  // else the write's completion frees the queue
            writes_.clear();
            queued_bytes_ = 0;
        }
        beast::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
        set_owes_answer(false);  // nothing more can reach this client
        if (busy_ && !answered_ && disconnect_fn_) {
            auto fn = std::move(disconnect_fn_);
            fn();
        }
    }

    // The connection's byte stream: the socket, or TLS over it. (One read and one write may be
    // in flight at once on either, from this strand.) Closing closes the socket under TLS
    // without a close_notify, as a timeout or reset would.
    template <typename F>
    void with_stream(F&& f) {
        if (tls_)
            f(*tls_);
        else
            f(socket_);
    }

    tcp::socket socket_;
    tcp::endpoint peer_;
    std::optional<net::ssl::stream<tcp::socket&>> tls_;
    net::steady_timer idle_timer_, write_timer_, probe_timer_;
    const HttpServerOptions& options_;
    const Handler& handler_;
    std::atomic<int>& counter_;
    std::atomic<size_t>& body_bytes_;   // the server's bodies being received
    std::atomic<int>& owing_sessions_;  // the server's connections with an answer not all sent
    bool owes_answer_ = false;          // whether this one counts there
    size_t reserved_body_bytes_ = 0;    // this session's part of it
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    std::optional<http::request<http::string_body>> pending_;
    std::optional<std::string> pending_error_;
    std::deque<std::string> writes_;  // front: the write in flight (while writing_)
    size_t queued_bytes_ = 0;
    std::function<void()> disconnect_fn_;
    std::string cors_;         // CORS header lines for the request being answered
    uint64_t generation_ = 0;  // of the request being answered
    bool reading_ = false, writing_ = false, busy_ = false, answered_ = false, streaming_ = false;
    bool keep_alive_ = true, http10_ = false, head_request_ = false;
    bool close_after_write_ = false, closed_ = false;
};

// The Responder of one request: posts to its session's strand, tagged with the
// request.
class Exchange : public Responder {
public:
    Exchange(std::shared_ptr<Session> session, uint64_t generation)
        : session_(std::move(session)), generation_(generation) {}

    void respond(int status, std::string content_type, std::string body) override {
        post([status, ct = std::move(content_type), b = std::move(body)](Session& s, uint64_t g) {
            s.respond(g, status, ct, b);
        });
    }
    void start_stream() override {
        post([](Session& s, uint64_t g) { s.start_stream(g); });
    }
    void send_chunk(std::string data) override {
        post([d = std::move(data)](Session& s, uint64_t g) mutable { s.send_chunk(g, std::move(d)); });
    }
    void end_stream() override {
        post([](Session& s, uint64_t g) { s.end_stream(g); });
    }
    void on_disconnect(std::function<void()> fn) override {
        post([f = std::move(fn)](Session& s, uint64_t g) mutable { s.on_disconnect(g, std::move(f)); });
    }

private:
    template <typename F>
    void post(F&& f) {
        net::post(session_->executor(),
                  [s = session_, g = generation_, fn = std::forward<F>(f)]() mutable { fn(*s, g); });
    }

    std::shared_ptr<Session> session_;
    uint64_t generation_;
};

std::shared_ptr<Responder> Session::make_exchange() {
    return std::make_shared<Exchange>(shared_from_this(), generation_);
}

// Room left for descriptors that are not connections (model files, ZeroMQ,
// logs, pipes).
constexpr int kReservedDescriptors = 256;

int default_max_connections() {
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == RLIM_INFINITY) return 65536;
    return std::max(16, static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 20)) - kReservedDescriptors);
}

// A server TLS context from the PEM files; Error(kInvalidArgument) naming the flag and file.
std::unique_ptr<net::ssl::context> make_tls_context(const HttpServerOptions::Tls& t) {
    if (t.cert_file.empty() || t.key_file.empty()) {
        raise(ErrorCode::kInvalidArgument, "HTTPS needs both --ssl-certfile and --ssl-keyfile");
    }
    auto ctx = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                     net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1 |
                     net::ssl::context::single_dh_use);
    const auto load = [](const char* flag, const std::string& file, auto&& fn) {
        beast::error_code ec;
        fn(ec);
        if (ec) raise(ErrorCode::kInvalidArgument, "{} '{}': {}", flag, file, ec.message());
    };
    load("--ssl-certfile", t.cert_file,
         [&](beast::error_code& ec) { ctx->use_certificate_chain_file(t.cert_file, ec); });
    load("--ssl-keyfile", t.key_file,
         [&](beast::error_code& ec) { ctx->use_private_key_file(t.key_file, net::ssl::context::pem, ec); });
    if (!t.ca_file.empty()) {
        load("--ssl-ca-certs", t.ca_file, [&](beast::error_code& ec) { ctx->load_verify_file(t.ca_file, ec); });
    }
    if (t.cert_reqs == 1) ctx->set_verify_mode(net::ssl::verify_peer);
    if (t.cert_reqs == 2) ctx->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
    return ctx;
}

tcp::endpoint resolve_endpoint(const std::string& host, int port) {
    beast::error_code ec;
    const auto address = net::ip::make_address(host, ec);
    if (!ec) return {address, static_cast<unsigned short>(port)};
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    const auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
        raise(ErrorCode::kInvalidArgument, "--host '{}' is neither an IP address nor a name that resolves: {}", host,
              ec ? ec.message() : "no addresses");
    }
    for (const auto& r : results) {  // IPv4 first: "localhost" clients mostly dial 127.0.0.1
        if (r.endpoint().address().is_v4()) return r.endpoint();
    }
    return results.begin()->endpoint();
}

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
    HttpServerOptions options;
    Handler handler;
    int max_connections = 0;
    std::atomic<int> connections{0};  // before ioc: sessions die with ioc's pending handlers
    std::atomic<size_t> body_bytes_in_flight{0};
    std::atomic<int> owing_sessions{0};
    net::io_context ioc;
    tcp::acceptor acceptor;
    net::steady_timer backoff;
    net::executor_work_guard<net::io_context::executor_type> work;
    int reserve_fd = -1;                     // given up to accept-and-close a client when descriptors run out
    bool accept_failing = false;             // logged once per burst
    bool at_limit = false;                   // likewise
    std::unique_ptr<net::ssl::context> tls;  // HTTPS when options.tls has a certificate

    Impl(HttpServerOptions o, Handler h)
        : options(std::move(o)),
          handler(std::move(h)),
          ioc(std::max(1, options.num_threads)),
          acceptor(net::make_strand(ioc)),
          backoff(acceptor.get_executor()),
          work(net::make_work_guard(ioc)) {
        max_connections = options.max_connections > 0 ? options.max_connections : default_max_connections();
        reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (!options.tls.cert_file.empty() || !options.tls.key_file.empty()) tls = make_tls_context(options.tls);
    }
    ~Impl() {
        if (reserve_fd >= 0) ::close(reserve_fd);
    }

    template <typename... Args>
    void log_warning(const char* format, Args... args) {
        if (options.logger) MOESERVE_LOG_W(*options.logger, "http", format, args...);
    }

    void accept() {
        // Handlers the server's own io_context holds keep only weak references: a strong one
        // would be a cycle (Impl owns the io_context), and the server would never be freed.
        acceptor.async_accept(net::make_strand(ioc),
                              [weak = weak_from_this()](beast::error_code ec, tcp::socket socket) {
                                  if (auto self = weak.lock()) self->on_accept(ec, std::move(socket));
                              });
    }

    void on_accept(beast::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
        if (ec) return on_accept_error(ec);
        if (accept_failing) {
            accept_failing = false;
            log_warning("accepting connections again");
        }
        beast::error_code ignored;
        if (connections.load() >= max_connections) {
            if (!at_limit) {
                at_limit = true;
                log_warning(
                    "%d connections open, the limit (--max-connections): new "
                    "clients get 503 until some close",
                    max_connections);
            }
            socket.non_blocking(true, ignored);  // best effort: never wait on a client we refuse
            net::write(
                socket,
                net::buffer(closing_response(503, "Too many open connections; retry later.", "too_many_connections")),
                ignored);
            socket.shutdown(tcp::socket::shutdown_both, ignored);
            socket.close(ignored);
        } else {
            at_limit = false;
            socket.set_option(tcp::no_delay(true), ignored);
            std::make_shared<Session>(std::move(socket), options, handler, connections, body_bytes_in_flight,
                                      owing_sessions, tls.get())
                ->start();
        }
        accept();
    }

    // Out of descriptors (or kernel memory): the pending client would make accept
    // fail again at once, a busy loop. Accept it with the reserve descriptor and
    // close it, then back off.
    void on_accept_error(beast::error_code ec) {
        if (!accept_failing) {
            accept_failing = true;
            log_warning(
                "accept failed (%s) with %d connections open; closing new "
                "clients and backing off",
                ec.message().c_str(), connections.load());
        }
        if (ec.value() == EMFILE || ec.value() == ENFILE) {
            if (reserve_fd >= 0) ::close(reserve_fd);
            const int fd = ::accept(acceptor.native_handle(), nullptr, nullptr);
            if (fd >= 0) ::close(fd);
            reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        backoff.expires_after(std::chrono::milliseconds(100));
        backoff.async_wait([weak = weak_from_this()](beast::error_code e) {
            auto self = weak.lock();
            if (!e && self) self->accept();
        });
    }
};

bool is_loopback_host(const std::string& host) { return resolve_endpoint(host, 0).address().is_loopback(); }

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(handler))) {
    auto& s = *impl_;
    if (s.options.port < 0 || s.options.port > 65535) {
        raise(ErrorCode::kInvalidArgument, "--port must be in [0, 65535]; got {}", s.options.port);
    }
    const tcp::endpoint endpoint = resolve_endpoint(s.options.host, s.options.port);
    beast::error_code ec;
    s.acceptor.open(endpoint.protocol(), ec);
    if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec && s.options.reuse_port)
        s.acceptor.set_option(net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true), ec);
    if (!ec) s.acceptor.bind(endpoint, ec);
    if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
        raise(ErrorCode::kIo, "cannot listen on {}:{}: {}", s.options.host, s.options.port, ec.message());
    }
    s.accept();
}

HttpServer::~HttpServer() { stop(); }

ReservedPort::ReservedPort(const std::string& host, int port) {
    if (port < 0 || port > 65535) raise(ErrorCode::kInvalidArgument, "--port must be in [0, 65535]; got {}", port);
    const tcp::endpoint endpoint = resolve_endpoint(host, port);
    fd_ = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    const bool ok = fd_ >= 0 && ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
                    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0 &&
                    ::bind(fd_, endpoint.data(), static_cast<socklen_t>(endpoint.size())) == 0;
    if (!ok) {
        const std::string why = std::strerror(errno);
        if (fd_ >= 0) ::close(fd_);
        raise(ErrorCode::kIo, "cannot listen on {}:{}: {}", host, port, why);
    }
    tcp::endpoint bound = endpoint;
    socklen_t size = static_cast<socklen_t>(bound.capacity());
    ::getsockname(fd_, bound.data(), &size);
    port_ = bound.port();
    // Another process's SO_REUSEPORT listener (of the same user) on this port would silently take
    // a share of our connections: nothing of ours listens yet, so any answer is a stranger's.
    tcp::endpoint probe = bound;
    if (probe.address().is_unspecified())
        probe.address(probe.address().is_v6() ? net::ip::address(net::ip::address_v6::loopback())
                                              : net::ip::address(net::ip::address_v4::loopback()));
    const int client = ::socket(probe.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool taken = client >= 0 && ::connect(client, probe.data(), static_cast<socklen_t>(probe.size())) == 0;
    if (client >= 0) ::close(client);
    if (taken) {
        ::close(fd_);
        raise(ErrorCode::kIo, "cannot listen on {}:{}: another process already listens there (SO_REUSEPORT)", host,
              port_);
    }
}

ReservedPort::~ReservedPort() {
    if (fd_ >= 0) ::close(fd_);
}

int HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

int HttpServer::max_connections() const { return impl_->max_connections; }

void HttpServer::run() {
    std::vector<std::thread> threads;
    for (int i = 1; i < impl_->options.num_threads; ++i) {
        threads.emplace_back([impl = impl_] { impl->ioc.run(); });
    }
    impl_->ioc.run();
    for (auto& t : threads) t.join();
}

void HttpServer::stop() {
    impl_->work.reset();
    impl_->ioc.stop();
}

int HttpServer::num_connections() const { return impl_->connections.load(); }

int HttpServer::num_unfinished_answers() const { return impl_->owing_sessions.load(); }

}  // namespace moeserve::serve
