// KvTransferAgent: one rank's end of PD disaggregation (docs/parallelism.md, "PD
// disaggregation"). A producer (prefill instance) rank serves KV from a thread on its own
// ROUTER socket: its TP rank 0 keeps the blocks of its finished requests (published) until a
// consumer releases them or hold_ms passes, and every rank serves the parts its cache holds of
// blocks a consumer names. A consumer (decode instance) rank fetches its parts from producers on
// a few worker threads (one fetch per producer instance at a time, so a stuck producer delays
// only its own requests), writing them straight into its KV cache, and hands each finished
// fetch back. Its connections share one ZeroMQ context and are bounded and evicted when idle.
// The rank's engine (or TP follower) thread calls every public method; block memory is shared
// safely because the scheduler keeps a block that is being shipped or received out of every
// batch (and out of the prefix cache until it is complete). kv_transfer_group.h coordinates the
// agents of one instance's TP ranks.
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
    int port = 0;                         // kv_port (a rank binds kv_port + kv_port_offset); 0 = the kernel picks
    std::string advertise_host{};         // what consumers dial; empty = bind_host
    int timeout_ms = 30000;               // consumer: a transfer silent this long fails its request
    int hold_ms = 120000;                 // producer: blocks nobody fetched in this time are freed
    std::string rank_plane_key{};         // ipc/auth.h; both instances must hold the same one

    bool produces() const { return role == Role::kProducer || role == Role::kBoth; }
    bool consumes() const { return role == Role::kConsumer || role == Role::kBoth; }
};

const char* kv_role_name(KvTransferConfig::Role role);

// A range of the consumer's parts and the producer rank to fetch it from.
struct KvPiece {
    std::string endpoint;
    int64_t first = 0, count = 0;  // the model's part indexes
    bool operator==(const KvPiece&) const = default;
};
// Covers `mine` with consecutive runs of parts, each from a producer rank that holds it (of
// several that do, the tp_rank-th in turn, so that the consumer's ranks spread over the
// producer's). Empty when some part is held by no rank.
std::vector<KvPiece> plan_pieces(const model::KvSlice& mine, const std::vector<ipc::KvRankSlice>& ranks, int tp_rank);

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
    // cache must outlive the agent. A producer binds its socket (kv_port + port_offset) here:
    // Error(kIo) naming the address if that fails. tp_rank picks among producer ranks that hold
    // the same parts (plan_pieces).
    KvTransferAgent(const KvTransferConfig& config, model::KvCache& cache, int port_offset, int tp_rank,
                    Logger* logger);
    ~KvTransferAgent();
    KvTransferAgent(const KvTransferAgent&) = delete;
    KvTransferAgent& operator=(const KvTransferAgent&) = delete;

    const KvTransferConfig& config() const { return config_; }
    // Producer: the address consumers fetch from (tcp://advertise_host:port); empty otherwise.
    const std::string& endpoint() const { return endpoint_; }
    // The model's KV parts this rank's cache holds.
    model::KvSlice slice() const { return cache_.slice(); }

    // --- producer ---
    struct Published {
        std::string id;
        std::vector<int32_t> block_ids;  // the prompt's blocks, in order
        ipc::KvTransferMeta meta;        // prompt, first token, logprobs (id, layout, sizes are filled in)
    };
    // A finished prefill's blocks, held for a consumer (completes a streamed transfer of that id).
    void publish(Published transfer);
    // Streaming: a prefill that has started; consumers may fetch its blocks as progress() says
    // they are complete, until publish() completes it or fail_published() gives it up (its blocks
    // are no longer the request's: from then on nothing reads them).
    void publish_started(const std::string& id, const std::vector<ipc::TokenId>& prompt_token_ids);
    void progress(const std::string& id, const std::vector<int32_t>& block_ids, int32_t computed_blocks);
    void fail_published(const std::string& id, const std::string& reason);
    // Transfers whose blocks may be freed now: released by their consumer, or not fetched from
    // for hold_ms after they were done (or since a consumer rank's last metadata request).
    std::vector<std::string> take_released();
    // TP rank 0: the ranks whose parts consumers fetch (this one alone until set).
    void set_ranks(std::vector<ipc::KvRankSlice> ranks);
    // The TP group's generation (ipc::TpKvExchange): fetches of named blocks from another one are refused.
    void set_generation(int64_t generation) { generation_ = generation; }
    // A TP follower's forward returned: the KV it wrote is visible to the named-block reads that
    // follow. Their order comes from the leader, which names only blocks of finished forwards (in
    // another process); this release/acquire pair makes it one within this process too (the CPU's
    // and the thread sanitizer's).
    void forward_done() { forwards_done_.fetch_add(1, std::memory_order_release); }
    // The group re-formed: other ranks' caches are new, so every published transfer is given up
    // (take_released returns them).
    void drop_published();

    // --- consumer ---
    struct FetchJob {
        std::string id;  // the local request
        std::string endpoint, remote_id;
        std::vector<int32_t> block_ids;  // local blocks for the whole prompt
        int32_t skip_blocks = 0;         // leading blocks already here (prefix cache): not fetched
        std::vector<ipc::TokenId> prompt_token_ids;
        bool release = true;  // false: another rank's fetch of the same request runs on; release() later
    };
    void fetch(FetchJob job);
    // Tells the producer at endpoint that its transfer remote_id may be freed (a worker sends it).
    void release(const std::string& endpoint, const std::string& remote_id);
    struct Fetched {
        std::string id;
        std::string error;  // non-empty: failed (the request fails with it)
        ipc::KvTransferMeta meta;
    };
    std::vector<Fetched> take_fetched();
    // Stops a queued or running fetch soon; it still comes back from take_fetched (failed).
    // An id not queued or running is ignored.
    void cancel(const std::string& id);
    // Fetches queued or running.
    bool has_pending_fetches() const;

    KvTransferCounters counters() const;

private:
    struct Held {
        Published transfer;
        double published_at = 0;      // when done, or the last metadata request (the lease of other ranks' reads)
        int sessions = 0;             // fetches being served: not freed meanwhile
        bool dropped = false;         // drop_published() while served: released when they end
        bool done = true;             // false: the prefill runs (streamed)
        int32_t computed_blocks = 0;  // leading blocks whose KV is complete
        std::string error;            // the prefill was given up: its sessions end with this
        bool release_asked = false;   // a consumer released it before its prefill or sessions ended
    };
    // One consumer fetch the serve thread answers over time (a streamed transfer's blocks as
    // they are computed).
    struct Session {
        std::string peer;
        ipc::KvFetch fetch;
        bool started = false;        // its first metadata went out
        bool chunks = false;         // this rank sends the requested parts (else only metadata)
        int32_t computed_sent = -1;  // the progress last told
        bool done_sent = false;
        int32_t next_block = 0;
        double last_sent = 0, began = 0;
        int64_t bytes = 0;
    };
    struct Outgoing {
        ipc::KvMessage message;
        std::string payload;
    };

    void serve_loop();
    // A fetch naming its blocks: answered at once (metadata, then every chunk).
    void serve_named_blocks(const std::string& peer, const ipc::KvFetch& fetch);
    // Sends what the session may send now; false when it has ended.
    bool pump(Session& s);
    // pump's part under mutex_: what to send, and whether the session ends after it.
    bool prepare_pump(Session& s, std::vector<Outgoing>& out);
    void end_session(const Session& s, bool completed);
    // Frees a transfer its consumer released once it is done and unread (mutex_ held); true if it did.
    bool release_if_asked(std::unordered_map<std::string, Held>::iterator it);
    ipc::KvTransferMeta progress_meta(const Session& s, const Held& h) const;
    // A chunk of the session's next computed blocks, or nothing (mutex_ held).
    std::optional<Outgoing> next_chunk(Session& s, const Held& h);
    bool holds(int64_t first_part, int64_t num_parts) const;
    // A consumer's connection to one producer rank: used by one thread at a time (in_use).
    struct Connection {
        std::unique_ptr<ipc::KvClientSocket> socket;
        double last_used = 0;
        bool in_use = false;
    };

    void fetch_loop();
    std::optional<std::pair<FetchJob, double>> next_job(std::unique_lock<std::mutex>& lock);
    void finish_job(const FetchJob& job, double queued_at, double started_at, Fetched result);
    std::string run_fetch(const FetchJob& job, ipc::KvTransferMeta& meta);
    std::string run_fetch_on(ipc::KvClientSocket& socket, const FetchJob& job, ipc::KvTransferMeta& meta);
    // Streaming: follows the producer's progress on socket until the transfer is done and every
    // block is here (chunks from that rank, or part ranges from the ranks meta names).
    std::string follow(ipc::KvClientSocket& socket, const ipc::KvFetch& request, const FetchJob& job,
                       const std::string& from, ipc::KvTransferMeta& meta);
    // Blocks [from, upto) of each of this rank's part ranges, from producer ranks that hold them.
    std::string fetch_pieces(const FetchJob& job, const ipc::KvTransferMeta& meta, int32_t from, int32_t upto);
    // A fetch of named blocks on socket: sends request, takes its metadata (refused, or blocks
    // that do not fit: an error) and writes the chunks into the request's parts of the job's
    // blocks. "" or why it failed.
    std::string exchange(ipc::KvClientSocket& socket, const ipc::KvFetch& request, const FetchJob& job,
                         const std::string& from);
    // Writes a chunk of request's parts at block `next` of the job; "" or why it does not fit.
    std::string write_chunk(const ipc::KvIncoming& in, const ipc::KvFetch& request, const FetchJob& job,
                            int32_t num_blocks, int32_t& next, const std::string& from);
    // The next message of fetch number `fetch`: nullopt with error set when the job was cancelled
    // or nothing came for timeout_ms.
    std::optional<ipc::KvIncoming> await(ipc::KvClientSocket& socket, uint64_t fetch, const FetchJob& job,
                                         const std::string& from, std::string& error);
    bool is_cancelled(const std::string& id);
    // A connection to endpoint not in use by another thread, opened if needed; nullptr with
    // error set if the endpoint's TCP port does not answer (a refused or dead producer fails its
    // fetch at once instead of after timeout_ms).
    Connection* acquire_connection(const std::string& endpoint, std::string& error);
    void send_release(const std::string& endpoint, const std::string& remote_id);
    void release_connection(Connection* connection, bool healthy);
    void evict_connections(size_t keep, double now);  // mutex_ held
    void log_error(const char* format, const std::string& a, const std::string& b);

    KvTransferConfig config_;
    model::KvCache& cache_;
    int tp_rank_;
    Logger* logger_;
    std::string endpoint_;
    std::atomic<bool> stop_{false};
    std::atomic<int64_t> generation_{0};
    std::atomic<int64_t> forwards_done_{0};

    mutable std::mutex mutex_;  // everything below
    std::unordered_map<std::string, Held> held_;
    std::vector<std::string> released_;
    std::vector<ipc::KvRankSlice> ranks_;
    std::deque<std::pair<FetchJob, double>> jobs_;  // with the steady time it was queued
    std::unordered_set<std::string> cancelled_;
    std::deque<std::pair<std::string, std::string>> releases_;  // (endpoint, remote id) to send
    std::unordered_set<std::string> running_;                   // ids of the fetches the workers run
    std::vector<Fetched> fetched_;
    KvTransferCounters counters_;
    std::condition_variable jobs_cv_;

    std::unordered_set<std::string> busy_endpoints_;  // a worker is fetching from each (the jobs' endpoints)
    std::multimap<std::string, Connection> connections_;

    std::unique_ptr<ipc::KvServerSocket> server_;           // used by the serve thread only
    std::vector<Session> sessions_;                         // the serve thread's
    std::unique_ptr<ipc::KvClientContext> client_context_;  // consumer: shared by its sockets
    std::atomic<uint64_t> num_fetches_{0};
    std::thread serve_thread_;
    std::vector<std::thread> fetch_threads_;
};

}  // namespace moeserve::engine
