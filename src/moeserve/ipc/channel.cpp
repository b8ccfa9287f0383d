// ZeroMQ implementation of the ipc channel (cppzmq). Connection events of the server's per-engine
// input sockets come from zmq socket monitors polled together with the output socket.
#include "moeserve/ipc/channel.h"

#include <zmq.hpp>

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/ipc/codec.h"

namespace moeserve::ipc {
namespace {

void set_common_options(zmq::socket_t& socket, const ChannelOptions& options) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, options.send_timeout_ms);
    socket.set(zmq::sockopt::sndhwm, 0);  // unbounded: the server bounds requests, not zmq
    socket.set(zmq::sockopt::rcvhwm, 0);
    socket.set(zmq::sockopt::heartbeat_ivl, options.heartbeat_interval_ms);
    socket.set(zmq::sockopt::heartbeat_timeout, options.heartbeat_timeout_ms);
}

bool send_bytes(zmq::socket_t& socket, const std::string& bytes) {
    try {
        return socket.send(zmq::buffer(bytes), zmq::send_flags::none).has_value();
    } catch (const zmq::error_t&) {
        return false;
    }
}

}  // namespace

struct ServerChannel::Impl {
    zmq::context_t context{1};
    zmq::socket_t output{context, zmq::socket_type::pull};
    std::vector<zmq::socket_t> inputs;
    std::vector<zmq::socket_t> monitors;  // PAIR sockets receiving the inputs' events
    std::vector<std::unique_ptr<std::mutex>> send_mutexes;
};

ServerChannel::ServerChannel(const std::string& output_address,
                             const std::vector<std::string>& input_addresses,
                             ChannelOptions options)
    : impl_(std::make_unique<Impl>()) {
    auto& s = *impl_;
    const auto bind = [](zmq::socket_t& socket, const std::string& address) {
        try {
            socket.bind(address);
        } catch (const zmq::error_t& e) {
            raise(ErrorCode::kIo, "ipc: cannot bind '{}': {}", address, e.what());
        }
    };
    set_common_options(s.output, options);
    bind(s.output, output_address);
    for (size_t i = 0; i < input_addresses.size(); ++i) {
        zmq::socket_t input(s.context, zmq::socket_type::push);
        set_common_options(input, options);
        bind(input, input_addresses[i]);
        // Monitor endpoints are per-ServerChannel (the context address space is ours alone).
        const std::string monitor_address = "inproc://monitor-" + std::to_string(i);
        if (zmq_socket_monitor(input.handle(), monitor_address.c_str(),
                               ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
            raise(ErrorCode::kIo, "ipc: cannot monitor '{}': {}", input_addresses[i],
                  zmq_strerror(zmq_errno()));
        }
        zmq::socket_t monitor(s.context, zmq::socket_type::pair);
        monitor.connect(monitor_address);
        s.inputs.push_back(std::move(input));
        s.monitors.push_back(std::move(monitor));
        s.send_mutexes.push_back(std::make_unique<std::mutex>());
    }
}

ServerChannel::~ServerChannel() = default;

int ServerChannel::num_engines() const { return static_cast<int>(impl_->inputs.size()); }

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
        event.engine = static_cast<int>(i - 1);
        event.kind = id == ZMQ_EVENT_ACCEPTED ? Event::Kind::kConnected : Event::Kind::kDisconnected;
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
    zmq::socket_t output{context, zmq::socket_type::push};
};

EngineChannel::EngineChannel(const std::string& input_address, const std::string& output_address,
                             ChannelOptions options)
    : impl_(std::make_unique<Impl>()) {
    set_common_options(impl_->input, options);
    set_common_options(impl_->output, options);
    try {
        impl_->input.connect(input_address);
        impl_->output.connect(output_address);
    } catch (const zmq::error_t& e) {
        raise(ErrorCode::kIo, "ipc: cannot connect to '{}' / '{}': {}", input_address,
              output_address, e.what());
    }
}

EngineChannel::~EngineChannel() = default;

bool EngineChannel::send(const EngineMessage& message) {
    return send_bytes(impl_->output, encode(message));
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
