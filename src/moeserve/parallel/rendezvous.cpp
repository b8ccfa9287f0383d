// TCP key-value store server and client for the Gloo rendezvous (format in rendezvous.h).
#include "moeserve/parallel/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "moeserve/core/error.h"

namespace moeserve::parallel {

namespace {

constexpr uint8_t kOpSet = 1;
constexpr uint8_t kOpGet = 2;
constexpr size_t kHeader = 9;
// The store is reachable by anyone who can reach the head's RPC port, and holds what it is sent
// until the deployment ends, so everything it keeps is bounded: a field, the store, the bytes
// buffered for requests not complete yet, the connections. What a deployment stores is far
// smaller: per rank a Gloo address list (~30 bytes per peer) and the configuration fingerprint.
constexpr uint32_t kMaxKey = 4u << 10;
constexpr uint32_t kMaxValue = 16u << 20;
constexpr size_t kMaxStoredBytes = size_t{256} << 20;
constexpr size_t kMaxBufferedBytes = size_t{256} << 20;
constexpr size_t kMaxConnections = 4096;

uint32_t read_u32(const char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

void append_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }

// getaddrinfo for host:port (numeric or name); first IPv4/IPv6 stream address.
addrinfo* resolve(const std::string& host, int port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (passive) hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    const std::string port_s = std::to_string(port);
    const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res);
    if (rc != 0) {
        raise(ErrorCode::kInvalidArgument, "cannot resolve rendezvous address '{}:{}': {}", host, port,
              gai_strerror(rc));
    }
    return res;
}

// Server-side connection state: bytes received but not yet parsed.
struct Conn {
    int fd;
    std::string in;
};

// The key-value map with the bytes it holds.
struct Table {
    std::map<std::string, std::string> kv;
    size_t bytes = 0;

    // false (nothing stored) when the store would pass kMaxStoredBytes.
    bool set(std::string key, std::string value) {
        const auto it = kv.find(key);
        const size_t old = it == kv.end() ? 0 : it->first.size() + it->second.size();
        const size_t now = key.size() + value.size();
        if (bytes - old + now > kMaxStoredBytes) return false;
        bytes = bytes - old + now;
        kv[std::move(key)] = std::move(value);
        return true;
    }
};

// Parses and answers every complete request in c.in; false when the peer sent garbage.
bool handle_requests(Conn& c, Table& table) {
    auto& kv = table.kv;
    while (c.in.size() >= kHeader) {
        const auto op = static_cast<uint8_t>(c.in[0]);
        const uint32_t klen = read_u32(c.in.data() + 1);
        const uint32_t vlen = read_u32(c.in.data() + 5);
        if (klen > kMaxKey || vlen > kMaxValue || (op != kOpSet && op != kOpGet)) return false;
        if (c.in.size() < kHeader + klen + vlen) return true;
        std::string key = c.in.substr(kHeader, klen);
        std::string reply;
        if (op == kOpSet) {  // the ack: 1 stored, 0 the store is full
            reply.push_back(table.set(std::move(key), c.in.substr(kHeader + klen, vlen)) ? 1 : 0);
        } else {
            auto it = kv.find(key);
            reply.push_back(it != kv.end() ? 1 : 0);
            append_u32(reply, it != kv.end() ? static_cast<uint32_t>(it->second.size()) : 0);
            if (it != kv.end()) reply += it->second;
        }
        c.in.erase(0, kHeader + klen + vlen);
        size_t sent = 0;
        while (sent < reply.size()) {
            const ssize_t n = ::send(c.fd, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) return false;
            sent += static_cast<size_t>(n);
        }
    }
    return true;
}

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const std::string& host, int port) {
    std::unique_ptr<TcpStoreServer> s(new TcpStoreServer());
    addrinfo* res = resolve(host, port, true);
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
        const int err = errno;
        freeaddrinfo(res);
        if (fd >= 0) ::close(fd);
        raise(ErrorCode::kIo, "cannot listen for the rendezvous store on {}:{}: {} (is the port in use?)", host, port,
              std::strerror(err));
    }
    freeaddrinfo(res);
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    s->port_ = ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                               : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    s->listen_fd_ = fd;
    s->thread_ = std::thread([p = s.get()] { p->serve(); });
    return s;
}

TcpStoreServer::~TcpStoreServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
}

void TcpStoreServer::serve() {
    Table table;
    std::vector<Conn> conns;
    std::vector<pollfd> fds;
    size_t buffered = 0;  // of every conns[i].in
    char buf[65536];
    while (!stop_) {
        fds.clear();
        fds.push_back({listen_fd_, POLLIN, 0});
        for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
        if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
        if (fds[0].revents & POLLIN) {
            const int cfd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (cfd >= 0 && conns.size() >= kMaxConnections) {
                ::close(cfd);  // a real rank retries its connect until its timeout
            } else if (cfd >= 0) {
                conns.push_back({cfd, {}});
            }
        }
        for (size_t i = 1; i < fds.size(); ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            Conn& c = conns[i - 1];
            const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
            buffered -= c.in.size();
            if (n > 0) c.in.append(buf, static_cast<size_t>(n));
            const bool ok = n > 0 && handle_requests(c, table) && buffered + c.in.size() <= kMaxBufferedBytes;
            if (!ok) {
                ::close(c.fd);
                c.fd = -1;
                c.in.clear();
            }
            buffered += c.in.size();
        }
        std::erase_if(conns, [](const Conn& c) { return c.fd < 0; });
    }
    for (Conn& c : conns) ::close(c.fd);
}

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout)
    : where_(host + ":" + std::to_string(port)), timeout_(timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last_error = "no attempt";
    while (true) {
        addrinfo* res = resolve(host, port, false);
        int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
            freeaddrinfo(res);
            fd_ = fd;
            break;
        }
        last_error = std::strerror(errno);
        freeaddrinfo(res);
        if (fd >= 0) ::close(fd);
        if (std::chrono::steady_clock::now() >= deadline) {
            raise(ErrorCode::kUnavailable,
                  "cannot reach the rendezvous store at {} within {} ms ({}); is the head node running and is "
                  "--data-parallel-address right?",
                  where_, timeout.count(), last_error);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

TcpStore::~TcpStore() {
    if (fd_ >= 0) ::close(fd_);
}

void TcpStore::send_all(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
        if (k <= 0) raise(ErrorCode::kUnavailable, "lost the rendezvous store at {}: {}", where_, std::strerror(errno));
        p += k;
        n -= static_cast<size_t>(k);
    }
}

void TcpStore::recv_all(void* data, size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
        const ssize_t k = ::recv(fd_, p, n, 0);
        if (k <= 0) {
            raise(ErrorCode::kUnavailable, "lost the rendezvous store at {}: {}", where_,
                  k == 0 ? "connection closed" : std::strerror(errno));
        }
        p += k;
        n -= static_cast<size_t>(k);
    }
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
    std::string msg;
    msg.push_back(static_cast<char>(kOpSet));
    append_u32(msg, static_cast<uint32_t>(key.size()));
    append_u32(msg, static_cast<uint32_t>(data.size()));
    msg += key;
    msg.append(data.data(), data.size());
    send_all(msg.data(), msg.size());
    char ack = 0;
    recv_all(&ack, 1);
    if (ack != 1) {
        raise(ErrorCode::kUnavailable, "the rendezvous store at {} is full; it refused key '{}' ({} bytes)", where_,
              key, data.size());
    }
}

bool TcpStore::try_get(const std::string& key, std::vector<char>& out) {
    std::string msg;
    msg.push_back(static_cast<char>(kOpGet));
    append_u32(msg, static_cast<uint32_t>(key.size()));
    append_u32(msg, 0);
    msg += key;
    send_all(msg.data(), msg.size());
    char head[5];
    recv_all(head, 5);
    const uint32_t len = read_u32(head + 1);
    out.resize(len);
    if (len > 0) recv_all(out.data(), len);
    return head[0] == 1;
}

std::vector<char> TcpStore::get(const std::string& key) {
    // NOTE: Gloo's connectFullMesh calls get() without wait() for some keys, relying on a
    // blocking get (as its file and hash stores do).
    std::vector<char> out;
    if (try_get(key, out)) return out;
    wait({key}, timeout_);
    try_get(key, out);
    return out;
}

void TcpStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<char> scratch;
    for (const std::string& key : keys) {
        while (!try_get(key, scratch)) {
            if (std::chrono::steady_clock::now() >= deadline) {
                raise(ErrorCode::kUnavailable,
                      "rendezvous: key '{}' did not appear at {} within {} ms; a rank did not start or uses a "
                      "different --data-parallel-size / --tensor-parallel-size",
                      key, where_, timeout.count());
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }
}

}  // namespace moeserve::parallel
