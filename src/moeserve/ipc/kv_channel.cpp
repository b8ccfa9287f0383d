#include "moeserve/ipc/kv_channel.h"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/ipc/codec.h"
#include "moeserve/ipc/curve.h"

namespace moeserve::ipc {
namespace {

void set_options(zmq::socket_t& socket, const KvChannelOptions& o) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, o.send_timeout_ms);
    socket.set(zmq::sockopt::heartbeat_ivl, o.heartbeat_interval_ms);
    socket.set(zmq::sockopt::heartbeat_timeout, o.heartbeat_timeout_ms);
    socket.set(zmq::sockopt::heartbeat_ttl, o.heartbeat_timeout_ms);
    socket.set(zmq::sockopt::handshake_ivl, o.send_timeout_ms);
}

// All frames of the next message, waiting up to timeout_ms; empty on timeout or EINTR.
std::vector<zmq::message_t> receive_frames(zmq::socket_t& socket, int timeout_ms) {
    std::vector<zmq::message_t> frames;
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    try {
        zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t&) {
        return frames;
    }
    if (!(item.revents & ZMQ_POLLIN)) return frames;
    do {
        frames.emplace_back();
        (void)socket.recv(frames.back(), zmq::recv_flags::none);
    } while (frames.back().more());
    return frames;
}

// frames[first] is the message, frames[first + 1] (if any) the payload.
KvIncoming parse(std::vector<zmq::message_t>& frames, size_t first) {
    if (frames.size() <= first) raise(ErrorCode::kInvalidArgument, "KV transfer: a message without frames");
    KvIncoming in;
    in.message = decode_kv_message(frames[first].to_string_view());
    if (frames.size() > first + 1) in.payload = frames[first + 1].to_string();
    return in;
}

bool send_frames(zmq::socket_t& socket, const std::string* peer, const KvMessage& message, std::string_view payload) {
    const std::string head = encode(message);
    try {
        if (peer && !socket.send(zmq::buffer(*peer), zmq::send_flags::sndmore)) return false;
        const auto more = payload.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
        if (!socket.send(zmq::buffer(head), more)) return false;
        if (!payload.empty() && !socket.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::none))
            return false;
        return true;
    } catch (const zmq::error_t&) {
        return false;
    }
}

// host and port of tcp://host:port (host may be [v6]); false if it is not of that form.
bool split_tcp_endpoint(const std::string& endpoint, std::string& host, std::string& port) {
    constexpr std::string_view kScheme = "tcp://";
    if (endpoint.rfind(kScheme, 0) != 0) return false;
    const size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon < kScheme.size()) return false;
    host = endpoint.substr(kScheme.size(), colon - kScheme.size());
    port = endpoint.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    return !host.empty() && !port.empty() && port.size() <= 5 &&
           port.find_first_not_of("0123456789") == std::string::npos;
}

// "" once a non-blocking connect to addr completes within timeout_ms, else the reason.
std::string try_connect(const addrinfo& addr, int timeout_ms) {
    const int fd = ::socket(addr.ai_family, addr.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, addr.ai_protocol);
    if (fd < 0) return std::strerror(errno);
    std::string error;
    if (::connect(fd, addr.ai_addr, addr.ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            error = std::strerror(errno);
        } else {
            pollfd p{fd, POLLOUT, 0};
            const int ready = ::poll(&p, 1, timeout_ms);
            int so_error = 0;
            socklen_t len = sizeof(so_error);
            if (ready == 0) {
                error = fmt::format("no answer within {} ms", timeout_ms);
            } else if (ready < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) {
                error = std::strerror(errno);
            } else if (so_error != 0) {
                error = std::strerror(so_error);
            }
        }
    }
    ::close(fd);
    return error;
}

}  // namespace

std::string probe_kv_endpoint(const std::string& endpoint, int timeout_ms) {
    std::string host, port;
    if (!split_tcp_endpoint(endpoint, host, port)) return "not a tcp://HOST:PORT address";
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
        return fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc));
    std::string error = "no address";
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
        error = try_connect(*a, timeout_ms);
        if (error.empty()) break;
    }
    ::freeaddrinfo(found);
    return error;
}

struct KvServerSocket::Impl {
    zmq::context_t context{1};
    std::unique_ptr<ZapHandler> zap;  // destroyed after the socket
    zmq::socket_t socket{context, zmq::socket_type::router};
};

KvServerSocket::KvServerSocket(const std::string& bind_address, const KvChannelOptions& options)
    : impl_(std::make_unique<Impl>()) {
    auto& s = *impl_;
    set_options(s.socket, options);
    // An unknown peer (one that reconnected) makes a send fail instead of vanishing silently.
    s.socket.set(zmq::sockopt::router_mandatory, true);
    if (!options.rank_plane_key.empty()) {
        const CurveKeys keys = derive_curve_keys(options.rank_plane_key);
        s.zap = std::make_unique<ZapHandler>(s.context, keys.client_public);
        set_server_auth(s.socket, keys);
    }
    try {
        s.socket.bind(bind_address);
    } catch (const zmq::error_t& e) {
        raise(ErrorCode::kIo, "KV transfer: cannot bind '{}': {}", bind_address, e.what());
    }
}

KvServerSocket::~KvServerSocket() = default;

std::string KvServerSocket::endpoint() const { return impl_->socket.get(zmq::sockopt::last_endpoint); }

std::optional<KvIncoming> KvServerSocket::receive(int timeout_ms) {
    auto frames = receive_frames(impl_->socket, timeout_ms);
    if (frames.empty()) return std::nullopt;
    KvIncoming in = parse(frames, 1);
    in.peer = frames[0].to_string();
    return in;
}

bool KvServerSocket::send(const std::string& peer, const KvMessage& message, std::string_view payload) {
    return send_frames(impl_->socket, &peer, message, payload);
}

struct KvClientContext::Impl {
    zmq::context_t context{1};
};

KvClientContext::KvClientContext() : impl_(std::make_unique<Impl>()) {}
KvClientContext::~KvClientContext() = default;

struct KvClientSocket::Impl {
    explicit Impl(zmq::context_t& context) : socket(context, zmq::socket_type::dealer) {}
    zmq::socket_t socket;
};

KvClientSocket::KvClientSocket(KvClientContext& context, const std::string& endpoint, const KvChannelOptions& options)
    : impl_(std::make_unique<Impl>(context.impl_->context)) {
    auto& s = *impl_;
    set_options(s.socket, options);
    if (!options.rank_plane_key.empty()) set_client_auth(s.socket, derive_curve_keys(options.rank_plane_key));
    try {
        s.socket.connect(endpoint);
    } catch (const zmq::error_t& e) {
        raise(ErrorCode::kIo, "KV transfer: cannot connect to '{}': {}", endpoint, e.what());
    }
}

KvClientSocket::~KvClientSocket() = default;

bool KvClientSocket::send(const KvMessage& message) { return send_frames(impl_->socket, nullptr, message, {}); }

std::optional<KvIncoming> KvClientSocket::receive(int timeout_ms) {
    auto frames = receive_frames(impl_->socket, timeout_ms);
    if (frames.empty()) return std::nullopt;
    return parse(frames, 0);
}

}  // namespace moeserve::ipc
