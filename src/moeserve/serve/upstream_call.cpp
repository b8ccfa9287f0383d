#include "moeserve/serve/upstream_call.h"

#include <utility>  // std::exchange, which asio/awaitable.hpp needs before it

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <chrono>
#include <limits>

namespace moeserve::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct UpstreamCall::Impl {
    asio::io_context ioc;
    std::atomic<bool> cancelled{false};
    std::mutex mutex;  // stream below, against cancel() from another thread
    beast::tcp_stream* stream = nullptr;
};

UpstreamCall::UpstreamCall() : impl_(std::make_unique<Impl>()) {}
UpstreamCall::~UpstreamCall() = default;

void UpstreamCall::cancel() {
    impl_->cancelled = true;
    // The close runs on run()'s thread; by then the call may have ended, so it looks again.
    asio::post(impl_->ioc, [impl = impl_.get()] {
        std::lock_guard lock(impl->mutex);
        if (impl->stream) impl->stream->socket().close();
    });
}

std::string UpstreamCall::run(const UpstreamRequest& r) {
    std::string error;
    const std::string where = fmt::format("{}:{}", r.host, r.port);
    auto call = [&]() -> asio::awaitable<void> {
        beast::tcp_stream stream(co_await asio::this_coro::executor);
        {
            std::lock_guard lock(impl_->mutex);
            impl_->stream = &stream;
        }
        struct Unregister {
            Impl& impl;
            ~Unregister() {
                std::lock_guard lock(impl.mutex);
                impl.stream = nullptr;
            }
        } unregister{*impl_};
        boost::system::error_code ec;
        const auto fail = [&](const char* phase) {
            error = impl_->cancelled ? std::string("cancelled") : fmt::format("{} {}: {}", phase, where, ec.message());
        };
        if (impl_->cancelled) {
            error = "cancelled";
            co_return;
        }
        tcp::resolver resolver(co_await asio::this_coro::executor);
        const auto endpoints = co_await resolver.async_resolve(r.host, std::to_string(r.port),
                                                               asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return fail("cannot resolve");
        stream.expires_after(std::chrono::milliseconds(r.connect_timeout_ms));
        co_await stream.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
        if (ec || impl_->cancelled) co_return fail("cannot connect to");
        stream.socket().set_option(tcp::no_delay(true));
        http::request<http::string_body> req{http::string_to_verb(r.method), r.target, 11};
        req.set(http::field::host, where);
        req.set(http::field::user_agent, "moeserve-proxy");
        if (!r.authorization.empty()) req.set(http::field::authorization, r.authorization);
        if (!r.body.empty()) req.set(http::field::content_type, "application/json");
        req.body() = r.body;
        req.prepare_payload();
        req.keep_alive(false);
        const auto idle = std::chrono::milliseconds(r.idle_timeout_ms);
        stream.expires_after(idle);
        co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return fail("cannot send to");
        beast::flat_buffer buffer;
        http::response_parser<http::buffer_body> parser;
        parser.body_limit(std::numeric_limits<std::uint64_t>::max());
        co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return fail("no answer from");
        answered_ = true;
        if (on_head)
            on_head(static_cast<int>(parser.get().result_int()), std::string(parser.get()[http::field::content_type]));
        char chunk[16384];
        while (!parser.is_done()) {
            parser.get().body().data = chunk;
            parser.get().body().size = sizeof(chunk);
            stream.expires_after(idle);
            co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
            if (ec == http::error::need_buffer) ec = {};
            if (ec || impl_->cancelled) co_return fail("the answer broke off from");
            const size_t n = sizeof(chunk) - parser.get().body().size;
            if (n > 0 && on_body) on_body(std::string_view(chunk, n));
        }
    };
    asio::co_spawn(impl_->ioc, call(), asio::detached);
    impl_->ioc.run();
    return error;
}

}  // namespace moeserve::serve
