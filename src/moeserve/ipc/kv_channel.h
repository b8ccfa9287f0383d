// ZeroMQ transport of the KV transfer (kv_messages.h): the producer binds a ROUTER on its
// kv_ip:kv_port, each consumer connects one DEALER per producer it fetches from. With a
// rank-plane key both ends speak CURVE (curve.h): instances of one PD deployment share that key,
// and a peer without it completes no handshake. Each frame set is [msgpack message] or
// [msgpack KvBlockChunk][raw block bytes]. Every wait is bounded by the caller's timeout.
// Not thread-safe: each socket belongs to one thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "moeserve/ipc/kv_messages.h"

namespace moeserve::ipc {

struct KvChannelOptions {
    std::string rank_plane_key;        // empty = no authentication (unit tests of the transport only)
    int send_timeout_ms = 5000;        // a send that cannot be queued in this time fails
    int heartbeat_interval_ms = 1000;  // ZMTP PING on idle connections
    int heartbeat_timeout_ms = 10000;  // a silent peer is disconnected
};

struct KvIncoming {
    std::string peer;  // KvServerSocket: the sender's routing id (answer with it)
    KvMessage message;
    std::string payload;  // the raw frame after a KvBlockChunk, else empty
};

class KvServerSocket {
public:
    // Binds bind_address (tcp://host:port, port 0 = the kernel picks). Raises Error(kIo) naming
    // the address when the bind fails.
    KvServerSocket(const std::string& bind_address, const KvChannelOptions& options);
    ~KvServerSocket();
    KvServerSocket(const KvServerSocket&) = delete;
    KvServerSocket& operator=(const KvServerSocket&) = delete;

    // The bound address, e.g. tcp://127.0.0.1:41234.
    std::string endpoint() const;
    // The next message, waiting up to timeout_ms; nullopt on timeout. A malformed message raises
    // Error(kInvalidArgument) (the caller logs and goes on).
    std::optional<KvIncoming> receive(int timeout_ms);
    // False if it could not be queued within send_timeout_ms (the peer is gone).
    bool send(const std::string& peer, const KvMessage& message, std::string_view payload = {});

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The ZeroMQ context a consumer's client sockets share: one I/O thread and one reaper for all of
// them, however many producers it fetches from (a context per socket costs 2 threads and several
// descriptors). Thread-safe; outlives its sockets.
class KvClientContext {
public:
    KvClientContext();
    ~KvClientContext();
    KvClientContext(const KvClientContext&) = delete;
    KvClientContext& operator=(const KvClientContext&) = delete;

private:
    friend class KvClientSocket;
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// "" if a TCP connection to endpoint (tcp://host:port, host a numeric IPv4/IPv6 address or a
// name) opens within timeout_ms, else why not ("connection refused", ...). ZeroMQ retries a
// refused connection forever in the background; this lets a consumer fail such a fetch at once.
std::string probe_kv_endpoint(const std::string& endpoint, int timeout_ms);

class KvClientSocket {
public:
    // Connects to a producer's endpoint (the connection completes in the background).
    KvClientSocket(KvClientContext& context, const std::string& endpoint, const KvChannelOptions& options);
    ~KvClientSocket();
    KvClientSocket(const KvClientSocket&) = delete;
    KvClientSocket& operator=(const KvClientSocket&) = delete;

    bool send(const KvMessage& message);
    std::optional<KvIncoming> receive(int timeout_ms);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace moeserve::ipc
