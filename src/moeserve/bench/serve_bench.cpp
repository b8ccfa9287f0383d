// Serving benchmark client on Boost.Asio/Beast coroutines: one event loop, one coroutine per
// request, a FIFO semaphore for --max-concurrency, a pool of idle keep-alive connections.
// Chunk timing follows vLLM's backend_request_func.py (see stream_reader.h for the rules).
#include "moeserve/bench/serve_bench.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <deque>
#include <memory>

#include "moeserve/bench/stream_reader.h"
#include "moeserve/core/error.h"
#include "moeserve/core/rng.h"

namespace moeserve::bench {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::awaitable;
using asio::use_awaitable;

constexpr size_t kErrorBodyLimit = 4096;  // bytes of a non-200 body kept for the message

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Standard normal from two uniforms (Box-Muller), in double precision.
double normal(Rng& rng) {
    const double u1 = 1.0 - rng.uniform_double();
    const double u2 = rng.uniform_double();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Gamma(shape, 1) by Marsaglia and Tsang; shape < 1 via Gamma(shape + 1) * U^(1 / shape).
double gamma_unit(Rng& rng, double shape) {
    if (shape < 1.0) {
        const double u = 1.0 - rng.uniform_double();
        return gamma_unit(rng, shape + 1.0) * std::pow(u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
        double x = 0.0, v = 0.0;
        do {
            x = normal(rng);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        const double u = 1.0 - rng.uniform_double();
        if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
    }
}

// FIFO counting semaphore for coroutines on one thread: release() hands the slot to the oldest
// waiter (whose timer it cancels) or returns it to the pool.
class AsyncSemaphore {
public:
    explicit AsyncSemaphore(int slots) : available_(slots) {}

    awaitable<void> acquire() {
        if (available_ > 0) {
            --available_;
            co_return;
        }
        auto timer = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                          asio::steady_timer::time_point::max());
        waiters_.push_back(timer);
        boost::system::error_code ec;
        co_await timer->async_wait(asio::redirect_error(use_awaitable, ec));  // woken by cancel
    }

    void release() {
        if (waiters_.empty()) {
            ++available_;
            return;
        }
        waiters_.front()->cancel();
        waiters_.pop_front();
    }

private:
    int available_;
    std::deque<std::shared_ptr<asio::steady_timer>> waiters_;
};

// Shared by the coroutines of one run (all on the loop's thread).
struct Client {
    const ServeBenchOptions& options;
    tcp::resolver::results_type endpoints;
    std::vector<std::unique_ptr<beast::tcp_stream>> idle;  // keep-alive connections
    std::string target;                                    // prefix + endpoint
    std::string host_header;
};

std::chrono::steady_clock::duration timeout_of(const ServeBenchOptions& o) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.request_timeout_s));
}

// The message of a non-200 answer: OpenAI's {"error": {"message": ...}} if present, else the body.
std::string http_error_message(unsigned status, beast::string_view reason, const std::string& body) {
    std::string detail = body.substr(0, 300);
    const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("error")) {
        const auto& e = j["error"];
        if (e.is_object() && e.contains("message") && e["message"].is_string()) {
            detail = e["message"].get<std::string>();
        } else if (e.is_string()) {
            detail = e.get<std::string>();
        }
    }
    return fmt::format("HTTP {} {}: {}", status, std::string(reason.data(), reason.size()), detail);
}

// One attempt on one connection. Returns false (and leaves `out` untouched) only when a reused
// keep-alive connection turned out to be closed before any byte came back: retry on a new one.
awaitable<bool> attempt(Client& client, beast::tcp_stream& stream, bool reused,
                        const http::request<http::string_body>& req, Clock::time_point start, RequestOutput& out,
                        bool& keep_alive) {
    boost::system::error_code ec;
    stream.expires_after(timeout_of(client.options));
    co_await http::async_write(stream, req, asio::redirect_error(use_awaitable, ec));
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // NOTE: boost::none trips a 1.74 bug
    if (!ec) co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) {
        if (reused && buffer.size() == 0) co_return false;
        throw boost::system::system_error(ec);
    }
    const unsigned status = parser.get().result_int();
    StreamReader reader(client.options.backend, start);
    std::string error_body;
    char chunk[16384];
    while (!parser.is_done()) {
        parser.get().body().data = chunk;
        parser.get().body().size = sizeof(chunk);
        // read_some: return with whatever arrived (async_read would wait for a full buffer).
        co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) throw boost::system::system_error(ec);
        const size_t n = sizeof(chunk) - parser.get().body().size;
        const std::string_view bytes(chunk, n);
        if (status != 200) {
            error_body.append(bytes.substr(0, kErrorBodyLimit - std::min(kErrorBodyLimit, error_body.size())));
        } else {
            reader.feed(bytes, Clock::now());
        }
    }
    keep_alive = parser.get().keep_alive();
    if (status != 200) {
        out.success = false;
        out.error = http_error_message(status, parser.get().reason(), error_body);
    } else {
        reader.finish(out);
    }
    co_return true;
}

awaitable<RequestOutput> send_request(Client& client, const SampleRequest& request) {
    RequestOutput out;
    out.prompt_len = request.prompt_len;
    http::request<http::string_body> req{http::verb::post, client.target, 11};
    req.set(http::field::host, client.host_header);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::user_agent, "moeserve-bench");
    if (!client.options.api_key.empty()) {
        req.set(http::field::authorization, "Bearer " + client.options.api_key);
    }
    req.body() = request_body(client.options, request);
    req.prepare_payload();

    const Clock::time_point start = Clock::now();  // vLLM: st before session.post (incl. connect)
    try {
        for (int tries = 0; tries < 2; ++tries) {
            std::unique_ptr<beast::tcp_stream> stream;
            const bool reused = !client.idle.empty();
            if (reused) {
                stream = std::move(client.idle.back());
                client.idle.pop_back();
            } else {
                stream = std::make_unique<beast::tcp_stream>(co_await asio::this_coro::executor);
                stream->expires_after(timeout_of(client.options));
                co_await stream->async_connect(client.endpoints, use_awaitable);
                stream->socket().set_option(tcp::no_delay(true));
            }
            bool keep_alive = false;
            if (!co_await attempt(client, *stream, reused, req, start, out, keep_alive)) continue;
            if (keep_alive) client.idle.push_back(std::move(stream));
            break;
        }
    } catch (const boost::system::system_error& e) {
        out = RequestOutput{};
        out.prompt_len = request.prompt_len;
        out.error =
            fmt::format("{}:{}: {}", client.options.server.host, client.options.server.port, e.code().message());
    }
    co_return out;
}

tcp::resolver::results_type resolve(asio::io_context& ioc, const ServerAddress& server) {
    tcp::resolver resolver(ioc);
    boost::system::error_code ec;
    auto results = resolver.resolve(server.host, std::to_string(server.port), ec);
    if (ec) {
        raise(ErrorCode::kUnavailable, "cannot resolve the server host '{}': {}", server.host, ec.message());
    }
    return results;
}

}  // namespace

Backend parse_backend(std::string_view name) {
    if (name == "openai" || name == "vllm") return Backend::kOpenAiCompletions;
    if (name == "openai-chat") return Backend::kOpenAiChat;
    raise(ErrorCode::kInvalidArgument, "--backend must be openai, vllm or openai-chat; got '{}'", name);
}

ServerAddress parse_base_url(std::string_view url) {
    constexpr std::string_view kHttp = "http://";
    if (url.substr(0, 8) == "https://") {
        raise(ErrorCode::kUnsupported, "--base-url '{}': https is not supported; use http://", url);
    }
    if (url.substr(0, kHttp.size()) != kHttp) {
        raise(ErrorCode::kInvalidArgument, "--base-url must look like http://HOST[:PORT][/PATH]; got '{}'", url);
    }
    std::string_view rest = url.substr(kHttp.size());
    ServerAddress addr;
    const size_t slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) addr.path_prefix = std::string(rest.substr(slash));
    while (!addr.path_prefix.empty() && addr.path_prefix.back() == '/') addr.path_prefix.pop_back();
    addr.port = 80;
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
        const std::string port(authority.substr(colon + 1));
        char* end = nullptr;
        const long p = std::strtol(port.c_str(), &end, 10);
        if (port.empty() || *end != '\0' || p < 1 || p > 65535) {
            raise(ErrorCode::kInvalidArgument, "--base-url '{}': bad port '{}'", url, port);
        }
        addr.port = static_cast<uint16_t>(p);
        authority = authority.substr(0, colon);
    }
    if (authority.size() >= 2 && authority.front() == '[' && authority.back() == ']') {
        authority = authority.substr(1, authority.size() - 2);
    }
    if (authority.empty()) raise(ErrorCode::kInvalidArgument, "--base-url '{}' has no host", url);
    addr.host = std::string(authority);
    return addr;
}

std::vector<double> arrival_offsets(int64_t num_requests, double request_rate, double burstiness, uint64_t seed) {
    if (!(request_rate > 0.0) || !(burstiness > 0.0)) {
        raise(ErrorCode::kInvalidArgument, "--request-rate and --burstiness must be positive; got {} and {}",
              request_rate, burstiness);
    }
    std::vector<double> offsets(static_cast<size_t>(std::max<int64_t>(num_requests, 0)), 0.0);
    if (std::isinf(request_rate)) return offsets;
    Rng rng(seed);
    const double theta = 1.0 / (request_rate * burstiness);
    for (size_t i = 1; i < offsets.size(); ++i) {
        offsets[i] = offsets[i - 1] + gamma_unit(rng, burstiness) * theta;
    }
    return offsets;
}

std::string request_body(const ServeBenchOptions& o, const SampleRequest& r) {
    nlohmann::ordered_json j;
    j["model"] = o.model;
    if (o.backend == Backend::kOpenAiChat) {
        j["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", r.prompt}}});
        j["temperature"] = 0.0;
        j["max_completion_tokens"] = r.expected_output_len;
    } else {
        j["prompt"] = r.prompt;
        j["temperature"] = 0.0;
        j["max_tokens"] = r.expected_output_len;
    }
    j["stream"] = true;
    j["stream_options"] = {{"include_usage", true}};
    if (o.ignore_eos) j["ignore_eos"] = true;
    return j.dump();
}

BenchRun run_benchmark_requests(const ServeBenchOptions& options, std::span<const SampleRequest> requests) {
    asio::io_context ioc;
    Client client{options,
                  resolve(ioc, options.server),
                  {},
                  options.server.path_prefix + options.endpoint,
                  fmt::format("{}:{}", options.server.host, options.server.port)};
    const std::vector<double> offsets =
        arrival_offsets(static_cast<int64_t>(requests.size()), options.request_rate, options.burstiness, options.seed);
    const auto total = static_cast<int64_t>(requests.size());
    BenchRun run;
    run.outputs.resize(requests.size());
    std::optional<AsyncSemaphore> semaphore;
    if (options.max_concurrency) semaphore.emplace(std::max(1, *options.max_concurrency));
    int64_t finished = 0;
    Clock::time_point start, end;

    auto one = [&](size_t i) -> awaitable<void> {
        if (semaphore) co_await semaphore->acquire();
        run.outputs[i] = co_await send_request(client, requests[i]);
        if (semaphore) semaphore->release();
        end = Clock::now();
        ++finished;
        if (options.on_progress) options.on_progress(finished, total);
    };
    auto schedule = [&]() -> awaitable<void> {
        auto executor = co_await asio::this_coro::executor;
        asio::steady_timer timer(executor);
        start = end = Clock::now();
        for (size_t i = 0; i < requests.size(); ++i) {
            if (offsets[i] > 0.0) {
                timer.expires_at(
                    start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offsets[i])));
                co_await timer.async_wait(use_awaitable);
            }
            asio::co_spawn(executor, one(i), asio::detached);
        }
    };
    asio::co_spawn(ioc, schedule(), asio::detached);
    ioc.run();  // returns when every request coroutine has finished
    client.idle.clear();
    run.duration_s = std::max(seconds(end - start), 1e-9);
    return run;
}

std::string http_get(const ServerAddress& server, const std::string& path, const std::string& api_key,
                     double timeout_s) {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    const std::string where = fmt::format("GET http://{}:{}{}{}", server.host, server.port, server.path_prefix, path);
    http::response<http::string_body> res;
    try {
        stream.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
        stream.connect(resolve(ioc, server));
        http::request<http::empty_body> req{http::verb::get, server.path_prefix + path, 11};
        req.set(http::field::host, fmt::format("{}:{}", server.host, server.port));
        if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
        http::write(stream, req);
        beast::flat_buffer buffer;
        http::read(stream, buffer, res);
    } catch (const boost::system::system_error& e) {
        raise(ErrorCode::kUnavailable, "{} failed: {}; is the server running?", where, e.code().message());
    }
    if (res.result_int() != 200) {
        raise(ErrorCode::kUnavailable, "{}: {}", where, http_error_message(res.result_int(), res.reason(), res.body()));
    }
    return res.body();
}

std::string first_served_model(const ServerAddress& server, const std::string& api_key, double timeout_s) {
    const std::string where = fmt::format("GET http://{}:{}{}/v1/models", server.host, server.port, server.path_prefix);
    std::string body;
    try {
        body = http_get(server, "/v1/models", api_key, timeout_s);
    } catch (const Error& e) {
        raise(e.code(), "{} (or pass --model)", e.what());
    }
    const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
        !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
        raise(ErrorCode::kInvalidArgument, "{} lists no model ({{\"data\": [{{\"id\": ...}}]}}); pass --model", where);
    }
    return j["data"][0]["id"].get<std::string>();
}

}  // namespace moeserve::bench
