// Beast implementation of HttpServer: one Session per connection on its own strand; responses
// and SSE chunks go through a write queue so any thread may answer (Responder posts to the
// strand). While a stream is open the next request is already being read, so a client that
// closes its socket is noticed at once and its request aborted.
#include "moeserve/serve/http_server.h"

#include <utility>  // boost 1.74 asio/awaitable.hpp misses it under C++20

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

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
    return http::obsolete_reason(static_cast<http::status>(status)).data();
}

std::string response_head(int status, const std::string& content_type, size_t content_length,
                          bool keep_alive) {
    return fmt::format("HTTP/1.1 {} {}\r\nServer: moeserve\r\nContent-Type: {}\r\n"
                       "Content-Length: {}\r\nConnection: {}\r\n\r\n",
                       status, reason_phrase(status), content_type, content_length,
                       keep_alive ? "keep-alive" : "close");
}

class Session : public Responder, public std::enable_shared_from_this<Session> {
public:
    Session(tcp::socket socket, const HttpServerOptions& options, const Handler& handler,
            std::atomic<int>& counter)
        : stream_(std::move(socket)), options_(options), handler_(handler), counter_(counter) {
        ++counter_;
    }
    ~Session() override { --counter_; }

    void start() {
        net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_next(); });
    }

    void respond(int status, std::string content_type, std::string body) override {
        net::post(stream_.get_executor(), [self = shared_from_this(), status,
                                           ct = std::move(content_type), b = std::move(body)] {
            if (self->answered_) return;
            self->answered_ = true;
            self->busy_ = false;
            self->enqueue(response_head(status, ct, b.size(), self->keep_alive_) + b);
            self->after_answer();
        });
    }

    void start_stream() override {
        net::post(stream_.get_executor(), [self = shared_from_this()] {
            if (self->answered_ || self->streaming_) return;
            self->streaming_ = true;
            self->enqueue(fmt::format(
                "HTTP/1.1 200 OK\r\nServer: moeserve\r\nContent-Type: text/event-stream\r\n"
                "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: {}\r\n\r\n",
                self->keep_alive_ ? "keep-alive" : "close"));
            // Read on while streaming: a closed socket ends the read at once (disconnect).
            self->stream_.expires_never();
            self->read_next();
        });
    }

    void send_chunk(std::string data) override {
        net::post(stream_.get_executor(), [self = shared_from_this(), d = std::move(data)] {
            if (!self->streaming_ || self->answered_ || d.empty()) return;
            self->enqueue(fmt::format("{:x}\r\n", d.size()) + d + "\r\n");
        });
    }

    void end_stream() override {
        net::post(stream_.get_executor(), [self = shared_from_this()] {
            if (!self->streaming_ || self->answered_) return;
            self->answered_ = true;
            self->busy_ = false;
            self->enqueue("0\r\n\r\n");
            self->after_answer();
        });
    }

    void on_disconnect(std::function<void()> fn) override {
        net::post(stream_.get_executor(), [self = shared_from_this(), f = std::move(fn)]() mutable {
            if (self->closed_) {
                if (!self->answered_ && f) f();
                return;
            }
            self->disconnect_fn_ = std::move(f);
        });
    }

private:
    void read_next() {
        if (closed_ || reading_) return;
        reading_ = true;
        parser_.emplace();
        parser_->body_limit(options_.max_body_bytes);
        parser_->header_limit(64 * 1024);
        if (!streaming_) stream_.expires_after(std::chrono::seconds(options_.idle_timeout_s));
        http::async_read(stream_, buffer_, *parser_,
                         [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
    }

    void on_read(beast::error_code ec) {
        reading_ = false;
        if (ec == http::error::body_limit) {
            keep_alive_ = false;
            answered_ = false;
            busy_ = true;
            const std::string body = fmt::format(
                R"({{"error":{{"message":"The request body is larger than {} bytes.","type":"invalid_request_error","param":null,"code":"request_too_large"}}}})",
                options_.max_body_bytes);
            enqueue(response_head(413, "application/json", body.size(), false) + body);
            answered_ = true;
            after_answer();
            return;
        }
        if (ec) {
            close();
            return;
        }
        auto request = parser_->release();
        if (busy_) {  // pipelined while answering: answer in order afterwards
            pending_.emplace(std::move(request));
            return;
        }
        dispatch(std::move(request));
    }

    void dispatch(http::request<http::string_body> request) {
        busy_ = true;
        answered_ = false;
        streaming_ = false;
        disconnect_fn_ = nullptr;
        keep_alive_ = request.keep_alive();
        HttpRequest r;
        r.method = std::string(request.method_string());
        r.target = std::string(request.target());
        if (auto it = request.find(http::field::authorization); it != request.end()) {
            r.authorization = std::string(it->value());
        }
        r.body = std::move(request.body());
        handler_(std::move(r), shared_from_this());
    }

    // After a complete answer: the next request (pipelined one first), or close.
    void after_answer() {
        streaming_ = false;
        disconnect_fn_ = nullptr;
        if (!keep_alive_) return;  // closed once the write queue drains
        if (pending_) {
            auto next = std::move(*pending_);
            pending_.reset();
            dispatch(std::move(next));
        } else {
            read_next();
        }
    }

    void enqueue(std::string bytes) {
        if (closed_) return;
        writes_.push_back(std::move(bytes));
        if (writes_.size() == 1) write_front();
    }

    void write_front() {
        net::async_write(stream_, net::buffer(writes_.front()),
                         [self = shared_from_this()](beast::error_code ec, size_t) {
                             if (ec) {
                                 self->close();
                                 return;
                             }
                             self->writes_.pop_front();
                             if (!self->writes_.empty()) {
                                 self->write_front();
                             } else if (!self->keep_alive_ && self->answered_) {
                                 self->close();
                             }
                         });
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        writes_.clear();
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
        stream_.close();
        if (busy_ && !answered_ && disconnect_fn_) {
            auto fn = std::move(disconnect_fn_);
            fn();
        }
    }

    beast::tcp_stream stream_;
    const HttpServerOptions& options_;
    const Handler& handler_;
    std::atomic<int>& counter_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    std::optional<http::request<http::string_body>> pending_;
    std::deque<std::string> writes_;
    std::function<void()> disconnect_fn_;
    bool reading_ = false, busy_ = false, answered_ = false, streaming_ = false;
    bool keep_alive_ = true, closed_ = false;
};

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
    HttpServerOptions options;
    Handler handler;
    std::atomic<int> connections{0};  // before ioc: sessions die with ioc's pending handlers
    net::io_context ioc;
    tcp::acceptor acceptor;
    net::executor_work_guard<net::io_context::executor_type> work;

    Impl(HttpServerOptions o, Handler h)
        : options(std::move(o)), handler(std::move(h)), ioc(std::max(1, options.num_threads)),
          acceptor(net::make_strand(ioc)), work(net::make_work_guard(ioc)) {}

    void accept() {
        acceptor.async_accept(net::make_strand(ioc), [self = shared_from_this()](
                                                         beast::error_code ec, tcp::socket socket) {
            if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
            if (!ec) {
                beast::error_code ignored;
                socket.set_option(tcp::no_delay(true), ignored);
                std::make_shared<Session>(std::move(socket), self->options, self->handler,
                                          self->connections)
                    ->start();
            }
            self->accept();
        });
    }
};

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(handler))) {
    auto& s = *impl_;
    beast::error_code ec;
    const auto address = net::ip::make_address(s.options.host, ec);
    if (ec) raise(ErrorCode::kInvalidArgument, "--host '{}' is not an IP address", s.options.host);
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(s.options.port));
    s.acceptor.open(endpoint.protocol(), ec);
    if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) s.acceptor.bind(endpoint, ec);
    if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
        raise(ErrorCode::kIo, "cannot listen on {}:{}: {}", s.options.host, s.options.port, ec.message());
    }
    s.accept();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::run() {
    std::vector<std::thread> threads;
    for (int i = 1; i < impl_->options.num_threads; ++i) {
        threads.emplace_back([impl = impl_] { impl->ioc.run(); });
    }
    impl_->ioc.run();
    for (auto& t : threads) t.join();
}

void HttpServer::stop_accepting() {
    net::post(impl_->acceptor.get_executor(), [impl = impl_] {
        beast::error_code ignored;
        impl->acceptor.close(ignored);
    });
}

void HttpServer::stop() {
    impl_->work.reset();
    impl_->ioc.stop();
}

int HttpServer::num_connections() const { return impl_->connections.load(); }

}  // namespace moeserve::serve
