// ZeroMQ transport of the ipc messages (docs/architecture.md, "Processes"): the API server binds one PULL
// socket that every engine pushes its outputs to, and one PUSH socket per engine for requests.
// ipc:// addresses on one host, tcp:// across hosts. Every wait is bounded; a dropped connection
// is reported as an event so a dead engine is noticed (plus ZMTP heartbeats for tcp peers).
//
//   API server                         engine i
//   PUSH bind  inputs[i]   ------->    PULL connect inputs[i]
//   PULL bind  output      <-------    PUSH connect output     (shared by all engines)
//
// With several API servers (--api-server-count) each server binds its own set; an engine's one
// PULL connects to every server's inputs[i] (fair-queued), and it has one PUSH per server's
// output, so it can send each request's outputs to the server that added it (client_routing.h).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/ipc/messages.h"

namespace moeserve::ipc {

struct ChannelOptions {
    int send_timeout_ms = 5000;        // a send that cannot be queued in this time fails
    int heartbeat_interval_ms = 1000;  // ZMTP PING on idle connections
    int heartbeat_timeout_ms = 30000;  // a peer silent this long is disconnected (--heartbeat-timeout-ms)
    // The deployment's rank-plane key (auth.h): every connection is CURVE-authenticated both
    // ways; empty = no authentication (unit tests of the transport only).
    std::string rank_plane_key = {};
};

// The API server's end. Thread-safe for send(); poll() must be called from one thread only.
class ServerChannel {
public:
    // Binds output_address and one input address per engine. Raises Error(kIo) naming the
    // address when a bind fails (in use, bad path).
    ServerChannel(const std::string& output_address, const std::vector<std::string>& input_addresses,
                  const ChannelOptions& options = {});
    ~ServerChannel();
    ServerChannel(const ServerChannel&) = delete;
    ServerChannel& operator=(const ServerChannel&) = delete;

    int num_engines() const;
    // The addresses actually bound (a tcp://host:* address gets its port here).
    std::string output_endpoint() const;
    std::string input_endpoint(int engine) const;

    // Queues message for engine. False if it could not be queued within send_timeout_ms
    // (engine not connected or not reading). Thread-safe.
    bool send(int engine, const ClientMessage& message);

    struct Event {
        // kConnected: a peer of input `engine` completed the handshake (with a key: it holds
        // the key); kDisconnected: a connection of input `engine` closed, which may be a
        // stranger's (zmq does not say whose), so it is no proof that the engine is gone;
        // kRejected: a peer failed the handshake (no or wrong key); kMalformed: a message that
        // does not decode.
        enum class Kind { kMessage, kConnected, kDisconnected, kRejected, kMalformed, kTimeout };
        Kind kind = Kind::kTimeout;
        int engine = -1;                       // kConnected / kDisconnected / kRejected (-1: output socket)
        std::optional<EngineMessage> message;  // kMessage
        std::string detail;                    // kMalformed: what was wrong; kRejected: the peer
    };
    // Waits up to timeout_ms (-1 = no limit) for the next message or connection event of the
    // input sockets. Call from one thread only.
    Event poll(int timeout_ms);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// An engine's end. Not thread-safe: the engine loop owns it.
class EngineChannel {
public:
    // Connects to the server's input address of this engine and to its output address.
    EngineChannel(const std::string& input_address, const std::string& output_address,
                  const ChannelOptions& options = {});
    // One API server (client) per element, in client-index order; both lists the same length (>= 1).
    EngineChannel(const std::vector<std::string>& input_addresses, const std::vector<std::string>& output_addresses,
                  const ChannelOptions& options = {});
    ~EngineChannel();
    EngineChannel(const EngineChannel&) = delete;
    EngineChannel& operator=(const EngineChannel&) = delete;

    int num_clients() const;
    // To every client (health replies, heartbeats). False if any could not be queued within
    // send_timeout_ms.
    bool send(const EngineMessage& message);
    // To one client (0 <= client < num_clients()).
    bool send(int client, const EngineMessage& message);
    // The next message, waiting up to timeout_ms (-1 = no limit, 0 = do not wait); nullopt on
    // timeout. Raises Error(kInvalidArgument) for a malformed message.
    std::optional<ClientMessage> receive(int timeout_ms);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace moeserve::ipc
