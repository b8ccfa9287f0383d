// CURVE authentication of ZeroMQ sockets with the keys derived from the rank-plane key
// (auth.h), shared by the request plane (channel.cpp) and the KV transfer (kv_channel.cpp).
// Internal to ipc: it exposes cppzmq types.
#pragma once

#include <zmq.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "moeserve/ipc/auth.h"

namespace moeserve::ipc {

// The ZAP domain every CURVE server socket of ours names.
inline constexpr const char* kZapDomain = "moeserve";

// ZAP (ZeroMQ RFC 27) handler of one zmq context: admits CURVE clients whose public key is
// `client_public_z85` and refuses everyone else. Create it before any CURVE server socket of the
// context binds, and destroy it after they are closed (it answers until then).
class ZapHandler {
public:
    ZapHandler(zmq::context_t& context, const std::string& client_public_z85);
    ~ZapHandler();
    ZapHandler(const ZapHandler&) = delete;
    ZapHandler& operator=(const ZapHandler&) = delete;

private:
    void run();
    // Request: version, request id, domain, address, identity, mechanism, credentials...
    void answer(const std::vector<zmq::message_t>& frames);

    zmq::socket_t socket_;
    std::array<uint8_t, 32> allowed_{};
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// A bound socket that proves it holds the server key and asks the context's ZAP handler.
void set_server_auth(zmq::socket_t& socket, const CurveKeys& keys);
// A connecting socket that proves it holds the client key and checks the server's.
void set_client_auth(zmq::socket_t& socket, const CurveKeys& keys);

}  // namespace moeserve::ipc
