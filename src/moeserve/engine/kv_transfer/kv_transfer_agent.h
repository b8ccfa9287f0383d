// KvTransferAgent: one engine's end of PD disaggregation (docs/parallelism.md, "PD
// disaggregation"). A producer (prefill instance) keeps the KV blocks of its finished
// requests and serves them from a thread on its own ROUTER socket until a consumer releases
// them or hold_ms passes. A consumer (decode instance) fetches blocks from producers on a few
// worker threads (one fetch per producer at a time, so a stuck producer delays only its own
// requests), writing them straight into its KV cache, and hands each finished fetch back. Its
// connections share one ZeroMQ context and are bounded and evicted when idle. The
// engine thread calls every public method except the constructor's threads' own work; block
// memory is shared safely because the scheduler keeps a block that is being shipped or
// received out of every batch (and out of the prefix cache until it is complete).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "moeserve/core/log.h"
#include "moeserve/ipc/kv_channel.h"
#include "moeserve/model/kv_cache.h"

namespace moeserve::engine {

// vLLM's --kv-transfer-config, as this engine uses it (cli/kv_transfer_config.h parses the JSON).
struct KvTransferConfig {
    enum class Role { kNone, kProducer, kConsumer, kBoth };
    Role role = Role::kNone;
    std::string bind_host = "127.0.0.1";  // kv_ip: where the producer's socket listens
    int port = 0;                         // kv_port + the engine's DP index; 0 = a port the kernel picks
    std::string advertise_host{};         // what consumers dial; empty = bind_host
    int timeout_ms = 30000;               // consumer: a transfer silent this long fails its request
    int hold_ms = 120000;                 // producer: blocks nobody fetched in this time are freed
    std::string rank_plane_key{};         // ipc/auth.h; both instances must hold the same one

    bool produces() const { return role == Role::kProducer || role == Role::kBoth; }
    bool consumes() const { return role == Role::kConsumer || role == Role::kBoth; }
};

const char* kv_role_name(KvTransferConfig::Role role);

// Cumulative counters of one agent (exported as moeserve:kv_transfer_* metrics).
struct KvTransferCounters {
    int64_t sent_bytes = 0, sent_transfers = 0;  // producer
    double send_seconds = 0;                     // producer: from a fetch's arrival to its last chunk
    int64_t expired_transfers = 0;               // producer: freed unfetched after hold_ms
    int64_t received_bytes = 0, received_transfers = 0, failed_transfers = 0;  // consumer
    double receive_seconds = 0;  // consumer: from the fetch request to the last block written
    double wait_seconds = 0;     // consumer: from a request's admission to its KV being complete
};

class KvTransferAgent {
public:
    // cache must outlive the agent. A producer binds its socket here: Error(kIo) naming the
    // address if that fails.
    KvTransferAgent(const KvTransferConfig& config, model::KvCache& cache, int engine_index, Logger* logger);
    ~KvTransferAgent();
    KvTransferAgent(const KvTransferAgent&) = delete;
    KvTransferAgent& operator=(const KvTransferAgent&) = delete;

    const KvTransferConfig& config() const { return config_; }
    // Producer: the address consumers fetch from (tcp://advertise_host:port); empty otherwise.
    const std::string& endpoint() const { return endpoint_; }

    // --- producer ---
    struct Published {
        std::string id;
        std::vector<int32_t> block_ids;  // the prompt's blocks, in order
        ipc::KvTransferMeta meta;        // prompt, first token, logprobs (id, layout, sizes are filled in)
    };
    void publish(Published transfer);
    // Transfers whose blocks may be freed now: released by their consumer, or unfetched for hold_ms.
    std::vector<std::string> take_released();

    // --- consumer ---
    struct FetchJob {
        std::string id;  // the local request
        std::string endpoint, remote_id;
        std::vector<int32_t> block_ids;  // local blocks for the whole prompt
        int32_t skip_blocks = 0;         // leading blocks already here (prefix cache): not fetched
        std::vector<ipc::TokenId> prompt_token_ids;
    };
    void fetch(FetchJob job);
    struct Fetched {
        std::string id;
        std::string error;  // non-empty: failed (the request fails with it)
        ipc::KvTransferMeta meta;
    };
    std::vector<Fetched> take_fetched();
    // Stops a queued or running fetch soon; it still comes back from take_fetched (failed).
    void cancel(const std::string& id);
    // Fetches queued or running.
    bool has_pending_fetches() const;

    KvTransferCounters counters() const;

private:
    struct Held {
        Published transfer;
        double published_at = 0;
        bool serving = false;  // the server thread is reading its blocks: not freed meanwhile
    };

    void serve_loop();
    void serve_fetch(const std::string& peer, const ipc::KvFetch& fetch);
    // A consumer's connection to one producer: used by one worker at a time (the worker that
    // holds its endpoint in busy_endpoints_).
    struct Connection {
        std::unique_ptr<ipc::KvClientSocket> socket;
        double last_used = 0;
        bool in_use = false;
    };

    void fetch_loop();
    std::optional<std::pair<FetchJob, double>> next_job(std::unique_lock<std::mutex>& lock);
    std::string run_fetch(const FetchJob& job, ipc::KvTransferMeta& meta);
    std::string run_fetch_on(ipc::KvClientSocket& socket, const FetchJob& job, ipc::KvTransferMeta& meta);
    ipc::KvClientSocket* acquire_connection(const std::string& endpoint, std::string& error);
    void release_connection(const std::string& endpoint, bool healthy);
    void evict_connections(size_t keep, double now);  // mutex_ held
    void log_error(const char* format, const std::string& a, const std::string& b);

    KvTransferConfig config_;
    model::KvCache& cache_;
    int engine_index_;
    Logger* logger_;
    std::string endpoint_;
    std::atomic<bool> stop_{false};

    mutable std::mutex mutex_;  // everything below
    std::unordered_map<std::string, Held> held_;
    std::vector<std::string> released_;
    std::deque<std::pair<FetchJob, double>> jobs_;  // with the steady time it was queued
    std::unordered_set<std::string> cancelled_;
    size_t running_fetches_ = 0;
    std::vector<Fetched> fetched_;
    KvTransferCounters counters_;
    std::condition_variable jobs_cv_;

    std::unordered_set<std::string> busy_endpoints_;  // a worker is fetching from each
    std::map<std::string, Connection> connections_;

    std::unique_ptr<ipc::KvServerSocket> server_;           // used by the serve thread only
    std::unique_ptr<ipc::KvClientContext> client_context_;  // consumer: shared by its sockets
    std::atomic<uint64_t> num_fetches_{0};
    std::thread serve_thread_;
    std::vector<std::thread> fetch_threads_;
};

}  // namespace moeserve::engine
