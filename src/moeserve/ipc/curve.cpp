#include "moeserve/ipc/curve.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "moeserve/core/error.h"

namespace moeserve::ipc {

ZapHandler::ZapHandler(zmq::context_t& context, const std::string& client_public_z85)
    : socket_(context, zmq::socket_type::rep) {
    if (zmq_z85_decode(allowed_.data(), client_public_z85.c_str()) == nullptr)
        raise(ErrorCode::kInternal, "bad z85 key");
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("inproc://zeromq.zap.01");  // before any socket with a ZAP domain accepts
    thread_ = std::thread([this] { run(); });
}

ZapHandler::~ZapHandler() {
    stop_ = true;
    thread_.join();
}

void ZapHandler::run() {
    while (!stop_) {
        zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        try {
            zmq::poll(&item, 1, std::chrono::milliseconds(100));
            if (!(item.revents & ZMQ_POLLIN)) continue;
            std::vector<zmq::message_t> frames;
            do {
                frames.emplace_back();
                (void)socket_.recv(frames.back(), zmq::recv_flags::none);
            } while (frames.back().more());
            answer(frames);
        } catch (const zmq::error_t&) {  // EINTR, or the context ends: look at stop_ again
        }
    }
}

void ZapHandler::answer(const std::vector<zmq::message_t>& f) {
    const std::string request_id = f.size() > 1 ? f[1].to_string() : "";
    bool ok = f.size() >= 7 && f[0].to_string_view() == "1.0" && f[5].to_string_view() == "CURVE" &&
              f[6].size() == allowed_.size() && std::memcmp(f[6].data(), allowed_.data(), allowed_.size()) == 0;
    const std::string status = ok ? "200" : "400", text = ok ? "OK" : "unknown key";
    socket_.send(zmq::buffer(std::string("1.0")), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(status), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(std::string()), zmq::send_flags::sndmore);  // user id
    socket_.send(zmq::buffer(std::string()), zmq::send_flags::none);     // metadata
}

void set_server_auth(zmq::socket_t& socket, const CurveKeys& keys) {
    socket.set(zmq::sockopt::zap_domain, kZapDomain);
    socket.set(zmq::sockopt::curve_server, true);
    socket.set(zmq::sockopt::curve_secretkey, keys.server_secret);
}

void set_client_auth(zmq::socket_t& socket, const CurveKeys& keys) {
    socket.set(zmq::sockopt::curve_serverkey, keys.server_public);
    socket.set(zmq::sockopt::curve_publickey, keys.client_public);
    socket.set(zmq::sockopt::curve_secretkey, keys.client_secret);
}

}  // namespace moeserve::ipc
