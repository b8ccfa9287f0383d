// ZeroMQ implementation of the ipc channel (cppzmq). Connection events of the server's sockets
// come from zmq socket monitors polled together with the output socket. With a rank-plane key
// every socket speaks CURVE (curve.h): the server's bound sockets are CURVE servers whose ZAP
// handler (a thread of the ServerChannel) admits only the engines' derived public key.
#include "moeserve/ipc/channel.h"

#include <zmq.hpp>

#include <array>
#include <atomic>
#include <cstring>
#include <thread>

#include "moeserve/core/error.h"
#include "moeserve/ipc/auth.h"
#include "moeserve/ipc/codec.h"
#include "moeserve/ipc/curve.h"

namespace moeserve::ipc {
namespace {

constexpr int kMonitorEvents = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;

void set_common_options(zmq::socket_t& socket, const ChannelOptions& options) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, options.send_timeout_ms);
    socket.set(zmq::sockopt::sndhwm, 0);  // unbounded: the server bounds requests, not zmq
    socket.set(zmq::sockopt::rcvhwm, 0);
    socket.set(zmq::sockopt::heartbeat_ivl, options.heartbeat_interval_ms);
    socket.set(zmq::sockopt::heartbeat_timeout, options.heartbeat_timeout_ms);
    socket.set(zmq::sockopt::heartbeat_ttl, options.heartbeat_timeout_ms);
    socket.set(zmq::sockopt::handshake_ivl, options.send_timeout_ms);  // a silent peer is dropped
}

bool send_bytes(zmq::socket_t& socket, const std::string& bytes) {
    try {
        return socket.send(zmq::buffer(bytes), zmq::send_flags::none).has_value();
    } catch (const zmq::error_t&) {
        return false;
    }
}

std::string last_endpoint(const zmq::socket_t& socket) { return socket.get(zmq::sockopt::last_endpoint); }

}  // namespace

struct ServerChannel::Impl {
    zmq::context_t context{1};
    std::unique_ptr<ZapHandler> zap;  // destroyed after the sockets: it answers until they are closed
    zmq::socket_t output{context, zmq::socket_type::pull};
    std::vector<zmq::socket_t> inputs;
    std::vector<zmq::socket_t> monitors;  // PAIRs receiving socket events: [0, n) the inputs', n the output's
    std::vector<std::unique_ptr<std::mutex>> send_mutexes;

    // Monitoring stops before any socket closes: libzmq's internal monitor socket then closes while
    // its reader (our PAIR) still exists, so no event is left in a pipe nobody drains.
    ~Impl() {
        for (auto& input : inputs) (void)zmq_socket_monitor(input.handle(), nullptr, 0);
        (void)zmq_socket_monitor(output.handle(), nullptr, 0);
    }
};

ServerChannel::ServerChannel(const std::string& output_address, const std::vector<std::string>& input_addresses,
                             const ChannelOptions& options)
    : impl_(std::make_unique<Impl>()) {
    auto& s = *impl_;
    std::optional<CurveKeys> keys;
    if (!options.rank_plane_key.empty()) {
        keys = derive_curve_keys(options.rank_plane_key);
        s.zap = std::make_unique<ZapHandler>(s.context, keys->client_public);
    }
    const auto bind = [](zmq::socket_t& socket, const std::string& address) {
        try {
            socket.bind(address);
        } catch (const zmq::error_t& e) {
            raise(ErrorCode::kIo, "ipc: cannot bind '{}': {}", address, e.what());
        }
    };
    const auto monitor = [&s](zmq::socket_t& socket, size_t index, const std::string& address) {
        // Monitor endpoints are per-ServerChannel (the context address space is ours alone).
        const std::string monitor_address = "inproc://monitor-" + std::to_string(index);
        if (zmq_socket_monitor(socket.handle(), monitor_address.c_str(), kMonitorEvents) != 0) {
            raise(ErrorCode::kIo, "ipc: cannot monitor '{}': {}", address, zmq_strerror(zmq_errno()));
        }
        zmq::socket_t pair(s.context, zmq::socket_type::pair);
        pair.connect(monitor_address);
        s.monitors.push_back(std::move(pair));
    };
    for (size_t i = 0; i < input_addresses.size(); ++i) {
        zmq::socket_t input(s.context, zmq::socket_type::push);
        set_common_options(input, options);
        if (keys) set_server_auth(input, *keys);
        monitor(input, i, input_addresses[i]);
        bind(input, input_addresses[i]);
        s.inputs.push_back(std::move(input));
        s.send_mutexes.push_back(std::make_unique<std::mutex>());
    }
    set_common_options(s.output, options);
    if (keys) set_server_auth(s.output, *keys);
    monitor(s.output, input_addresses.size(), output_address);
    bind(s.output, output_address);
}

ServerChannel::~ServerChannel() = default;

int ServerChannel::num_engines() const { return static_cast<int>(impl_->inputs.size()); }

std::string ServerChannel::output_endpoint() const { return last_endpoint(impl_->output); }

std::string ServerChannel::input_endpoint(int engine) const {
    return last_endpoint(impl_->inputs.at(static_cast<size_t>(engine)));
}

bool ServerChannel::send(int engine, const ClientMessage& message) {
    MOESERVE_CHECK(engine >= 0 && engine < num_engines(), "engine {} of {}", engine, num_engines());
    const std::string bytes = encode(message);
    std::lock_guard lock(*impl_->send_mutexes[static_cast<size_t>(engine)]);
    return send_bytes(impl_->inputs[static_cast<size_t>(engine)], bytes);
}

ServerChannel::Event ServerChannel::poll(int timeout_ms) {
    auto& s = *impl_;
    std::vector<zmq::pollitem_t> items;
    items.push_back({s.output.handle(), 0, ZMQ_POLLIN, 0});
    for (auto& m : s.monitors) items.push_back({m.handle(), 0, ZMQ_POLLIN, 0});
    Event event;
    try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t&) {  // EINTR: a signal arrived; the caller polls again
        return event;
    }
    for (size_t i = 1; i < items.size(); ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        zmq::message_t head, address;
        (void)s.monitors[i - 1].recv(head, zmq::recv_flags::none);
        (void)s.monitors[i - 1].recv(address, zmq::recv_flags::none);
        uint16_t id = 0;
        if (head.size() >= sizeof(id)) std::memcpy(&id, head.data(), sizeof(id));
        const bool is_input = i - 1 < s.inputs.size();
        event.engine = is_input ? static_cast<int>(i - 1) : -1;
        event.detail = address.to_string();
        if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            event.kind = is_input ? Event::Kind::kConnected : Event::Kind::kTimeout;
        } else if (id == ZMQ_EVENT_DISCONNECTED) {
            event.kind = is_input ? Event::Kind::kDisconnected : Event::Kind::kTimeout;
        } else {
            event.kind = Event::Kind::kRejected;
        }
        return event;
    }
    if (items[0].revents & ZMQ_POLLIN) {
        zmq::message_t bytes;
        (void)s.output.recv(bytes, zmq::recv_flags::none);
        try {
            event.message = decode_engine_message(bytes.to_string_view());
            event.kind = Event::Kind::kMessage;
        } catch (const Error& e) {
            event.kind = Event::Kind::kMalformed;
            event.detail = e.what();
        }
    }
    return event;
}

struct EngineChannel::Impl {
    zmq::context_t context{1};
    zmq::socket_t input{context, zmq::socket_type::pull};
    std::vector<zmq::socket_t> outputs;  // one per client
};

EngineChannel::EngineChannel(const std::string& input_address, const std::string& output_address,
                             const ChannelOptions& options)
    : EngineChannel(std::vector<std::string>{input_address}, std::vector<std::string>{output_address}, options) {}

EngineChannel::EngineChannel(const std::vector<std::string>& input_addresses,
                             const std::vector<std::string>& output_addresses, const ChannelOptions& options)
    : impl_(std::make_unique<Impl>()) {
    if (input_addresses.empty() || input_addresses.size() != output_addresses.size()) {
        raise(ErrorCode::kInvalidArgument, "ipc: {} input and {} output addresses; expected one of each per client",
              input_addresses.size(), output_addresses.size());
    }
    std::optional<CurveKeys> keys;
    if (!options.rank_plane_key.empty()) keys = derive_curve_keys(options.rank_plane_key);
    set_common_options(impl_->input, options);
    if (keys) set_client_auth(impl_->input, *keys);
    for (size_t i = 0; i < output_addresses.size(); ++i) {
        zmq::socket_t output(impl_->context, zmq::socket_type::push);
        set_common_options(output, options);
        if (keys) set_client_auth(output, *keys);
        impl_->outputs.push_back(std::move(output));
    }
    for (size_t i = 0; i < input_addresses.size(); ++i) {
        try {
            impl_->input.connect(input_addresses[i]);
            impl_->outputs[i].connect(output_addresses[i]);
        } catch (const zmq::error_t& e) {
            raise(ErrorCode::kIo, "ipc: cannot connect to '{}' / '{}': {}", input_addresses[i], output_addresses[i],
                  e.what());
        }
    }
}

EngineChannel::~EngineChannel() = default;

int EngineChannel::num_clients() const { return static_cast<int>(impl_->outputs.size()); }

bool EngineChannel::send(const EngineMessage& message) {
    const std::string bytes = encode(message);
    bool ok = true;
    for (auto& output : impl_->outputs) ok = send_bytes(output, bytes) && ok;
    return ok;
}

bool EngineChannel::send(int client, const EngineMessage& message) {
    MOESERVE_CHECK(client >= 0 && client < num_clients(), "client {} of {}", client, num_clients());
    return send_bytes(impl_->outputs[static_cast<size_t>(client)], encode(message));
}

std::optional<ClientMessage> EngineChannel::receive(int timeout_ms) {
    zmq::pollitem_t item{impl_->input.handle(), 0, ZMQ_POLLIN, 0};
    try {
        zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t&) {  // EINTR: a signal arrived; the caller polls again
        return std::nullopt;
    }
    if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
    zmq::message_t bytes;
    (void)impl_->input.recv(bytes, zmq::recv_flags::none);
    return decode_client_message(bytes.to_string_view());
}

}  // namespace moeserve::ipc
