// A tiny OpenAI-compatible streaming server for the benchmark client's tests: loopback, a thread
// per connection, HTTP/1.1 keep-alive, SSE in chunked encoding with events split across writes.
// It records what it saw (bodies, peak concurrency). Every blocking wait is bounded.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace moeserve::bench::test {

struct FakeServerOptions {
    int num_chunks = 4;  // content chunks per streamed response
    std::string chunk_text = "hi";
    bool send_usage = true;  // a final usage chunk when the request asks for it
    bool chat = false;       // chat.completion.chunk shapes (opening role chunk included)
    // HTTP status for a request body; 200 streams, anything else answers an OpenAI error.
    std::function<int(const nlohmann::json&)> status_for{};
    int pause_after_first_ms = 0;  // pause between the first content chunk and the rest
    int hold_until_in_flight = 0;  // the first N requests wait until N are open (<= 5 s)
};

class FakeOpenAiServer {
public:
    explicit FakeOpenAiServer(FakeServerOptions options);
    ~FakeOpenAiServer();
    FakeOpenAiServer(const FakeOpenAiServer&) = delete;
    FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

    uint16_t port() const { return port_; }
    int max_in_flight() const { return max_in_flight_; }
    int num_requests() const { return num_requests_; }
    std::vector<nlohmann::json> bodies();
    std::vector<std::string> authorizations();

private:
    void accept_loop();
    void serve_connection(boost::asio::ip::tcp::socket socket);
    void stream_response(boost::asio::ip::tcp::socket& socket, const nlohmann::json& body);
    void finish_request();

    FakeServerOptions options_;
    boost::asio::io_context ioc_;
    boost::asio::ip::tcp::acceptor acceptor_;
    uint16_t port_ = 0;
    std::atomic<bool> stopping_{false};
    std::thread accept_thread_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<std::thread> connection_threads_;
    std::vector<int> open_fds_;
    std::vector<nlohmann::json> bodies_;
    std::vector<std::string> authorizations_;
    int in_flight_ = 0;
    std::atomic<int> max_in_flight_{0};
    std::atomic<int> num_requests_{0};
};

// A loopback port with nothing listening (bound, then closed).
uint16_t unused_port();

}  // namespace moeserve::bench::test
