// Rendezvous: a small TCP key-value store that the head hosts (at --data-parallel-address, on
// the --data-parallel-rpc-port) and every rank uses to exchange Gloo addresses and check that all
// nodes agree on the configuration. The installed Gloo (2022) has only file/hash/redis stores.
//
// Wire format, one request per message, little-endian:
//   request  [u8 op][u32 key_len][u32 value_len][key][value]   op 1 = set, 2 = get
//   reply    set: [u8 stored] (0: the store is full)   get: [u8 found][u32 value_len][value]
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace moeserve::parallel {

// Serves the store on a background thread until destroyed. Thread-safe to destroy from the owner.
class TcpStoreServer {
public:
    // Binds host:port (port 0: an ephemeral port, see port()). Throws Error kIo naming the address
    // when the port cannot be bound.
    static std::unique_ptr<TcpStoreServer> start(const std::string& host, int port);
    ~TcpStoreServer();
    TcpStoreServer(const TcpStoreServer&) = delete;
    TcpStoreServer& operator=(const TcpStoreServer&) = delete;

    int port() const { return port_; }

private:
    TcpStoreServer() = default;
    void serve();

    int listen_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// Client; implements gloo's Store so gloo::rendezvous::Context::connectFullMesh can use it.
// Not thread-safe (one connection, one request at a time).
class TcpStore : public gloo::rendezvous::Store {
public:
    // Connects to host:port, retrying until `timeout` (the head may start after the ranks).
    // Throws Error kUnavailable naming the address when it cannot connect in time.
    TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout);
    ~TcpStore() override;

    void set(const std::string& key, const std::vector<char>& data) override;
    // Blocks until the key is present; throws Error kUnavailable after the store's timeout.
    std::vector<char> get(const std::string& key) override;
    void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
    // Throws Error kUnavailable naming the missing keys when they do not all appear in time.
    void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

    // The value, if present now.
    bool try_get(const std::string& key, std::vector<char>& out);

private:
    void send_all(const void* data, size_t n);
    void recv_all(void* data, size_t n);

    int fd_ = -1;
    std::string where_;
    std::chrono::milliseconds timeout_;
};

}  // namespace moeserve::parallel
