// The fake OpenAI streaming server of the bench tests (see fake_openai_server.h).
#include "fake_openai_server.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>

namespace moeserve::bench::test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

void write_all(tcp::socket& s, const std::string& bytes) { asio::write(s, asio::buffer(bytes)); }

// One HTTP chunk holding `data`, written in two pieces to fragment the SSE event.
void write_chunk(tcp::socket& s, const std::string& data) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    const size_t half = data.size() / 2;
    write_all(s, size + data.substr(0, half));
    write_all(s, data.substr(half) + "\r\n");
}

}  // namespace

FakeOpenAiServer::FakeOpenAiServer(FakeServerOptions options)
    : options_(std::move(options)), acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
}

FakeOpenAiServer::~FakeOpenAiServer() {
    stopping_ = true;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
        cv_.notify_all();
    }
    boost::system::error_code ec;
    acceptor_.cancel(ec);
    ioc_.stop();
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        threads.swap(connection_threads_);
    }
    for (auto& t : threads) t.join();
}

std::vector<nlohmann::json> FakeOpenAiServer::bodies() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
}

std::vector<std::string> FakeOpenAiServer::authorizations() {
    std::lock_guard<std::mutex> lock(mutex_);
    return authorizations_;
}

void FakeOpenAiServer::accept_loop() {
    std::function<void()> arm = [&] {
        acceptor_.async_accept([&](boost::system::error_code ec, tcp::socket socket) {
            if (ec || stopping_) return;
            std::lock_guard<std::mutex> lock(mutex_);
            open_fds_.push_back(socket.native_handle());
            connection_threads_.emplace_back(
                [this, s = std::move(socket)]() mutable { serve_connection(std::move(s)); });
            arm();
        });
    };
    arm();
    ioc_.run();
}

void FakeOpenAiServer::serve_connection(tcp::socket socket) {
    timeval tv{5, 0};  // bound every read: a silent client cannot keep the thread forever
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    beast::flat_buffer buffer;
    while (!stopping_) {
        http::request<http::string_body> req;
        boost::system::error_code ec;
        http::read(socket, buffer, req, ec);
        if (ec) break;
        try {
            if (req.method() == http::verb::get && req.target() == "/v1/models") {
                http::response<http::string_body> res{http::status::ok, 11};
                res.set(http::field::content_type, "application/json");
                res.body() = R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})";
                res.prepare_payload();
                http::write(socket, res);
                continue;
            }
            const auto body = nlohmann::json::parse(req.body());
            int status = 200;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                bodies_.push_back(body);
                authorizations_.emplace_back(req[http::field::authorization]);
                ++num_requests_;
                ++in_flight_;
                max_in_flight_ = std::max(max_in_flight_.load(), in_flight_);
                cv_.notify_all();
                // The first hold_until_in_flight requests wait until all of them are open.
                if (num_requests_ <= options_.hold_until_in_flight) {
                    cv_.wait_for(lock, std::chrono::seconds(5),
                                 [&] { return stopping_ || in_flight_ >= options_.hold_until_in_flight; });
                }
            }
            if (options_.status_for) status = options_.status_for(body);
            if (status != 200) {
                http::response<http::string_body> res{static_cast<http::status>(status), 11};
                res.set(http::field::content_type, "application/json");
                res.body() = R"({"error":{"message":"fake failure","type":"server_error","param":null,"code":)" +
                             std::to_string(status) + "}}";
                res.prepare_payload();
                finish_request();
                http::write(socket, res);
            } else {
                stream_response(socket, body);  // calls finish_request() before its last bytes
            }
        } catch (const std::exception&) {
            break;
        }
    }
}

void FakeOpenAiServer::stream_response(tcp::socket& socket, const nlohmann::json& body) {
    write_all(socket,
              "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
              "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
    const bool chat = options_.chat;
    const std::string object = chat ? "chat.completion.chunk" : "text_completion";
    auto event = [&](const nlohmann::json& choice) {
        nlohmann::json j{{"id", "cmpl-1"},
                         {"object", object},
                         {"model", "fake-model"},
                         {"choices", nlohmann::json::array({choice})}};
        return "data: " + j.dump() + "\n\n";
    };
    if (chat) write_chunk(socket, event({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}}));
    for (int i = 0; i < options_.num_chunks; ++i) {
        const nlohmann::json choice = chat ? nlohmann::json{{"index", 0}, {"delta", {{"content", options_.chunk_text}}}}
                                           : nlohmann::json{{"index", 0}, {"text", options_.chunk_text}};
        write_chunk(socket, event(choice));
        std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? std::max(1, options_.pause_after_first_ms) : 1));
    }
    const bool usage =
        options_.send_usage && body.contains("stream_options") && body["stream_options"].value("include_usage", false);
    if (usage) {
        nlohmann::json j{{"id", "cmpl-1"},
                         {"object", object},
                         {"model", "fake-model"},
                         {"choices", nlohmann::json::array()},
                         {"usage",
                          {{"prompt_tokens", 7},
                           {"completion_tokens", options_.num_chunks},
                           {"total_tokens", 7 + options_.num_chunks}}}};
        write_chunk(socket, "data: " + j.dump() + "\n\n");
    }
    write_chunk(socket, "data: [DONE]\n\n");
    finish_request();
    write_all(socket, "0\r\n\r\n");
}

// Counted as finished before the response's last bytes leave, so a client can never open its
// next request while the server still counts this one: max_in_flight is exact.
void FakeOpenAiServer::finish_request() {
    std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
}

uint16_t unused_port() {
    asio::io_context ioc;
    tcp::acceptor a(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const uint16_t port = a.local_endpoint().port();
    a.close();
    return port;
}

}  // namespace moeserve::bench::test
