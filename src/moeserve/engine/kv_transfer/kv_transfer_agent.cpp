#include "moeserve/engine/kv_transfer/kv_transfer_agent.h"

#include <fmt/format.h>

#include <algorithm>

#include "moeserve/core/clock.h"
#include "moeserve/core/error.h"

namespace moeserve::engine {

namespace {

constexpr int kPollMs = 100;                      // how often the threads look at stop_
constexpr int64_t kChunkBytes = 4 * 1024 * 1024;  // blocks per KvBlockChunk: about this many bytes
// Consumer: fetches from this many producers run at once (from one producer, one at a time).
constexpr int kFetchWorkers = 4;
// Consumer: connections kept open at most (least recently used closed first), and how long an
// unused one stays. Each holds a descriptor or two in the shared context.
constexpr size_t kMaxConnections = 32;
constexpr double kIdleConnectionSeconds = 60;
constexpr int kProbeMs = 2000;  // consumer: a new producer's TCP port must answer within this

ipc::KvChannelOptions channel_options(const KvTransferConfig& c) {
    ipc::KvChannelOptions o;
    o.rank_plane_key = c.rank_plane_key;
    o.heartbeat_timeout_ms = std::max(1000, c.timeout_ms);
    return o;
}

}  // namespace

const char* kv_role_name(KvTransferConfig::Role role) {
    switch (role) {
        case KvTransferConfig::Role::kProducer:
            return "kv_producer";
        case KvTransferConfig::Role::kConsumer:
            return "kv_consumer";
        case KvTransferConfig::Role::kBoth:
            return "kv_both";
        case KvTransferConfig::Role::kNone:
            break;
    }
    return "none";
}

KvTransferAgent::KvTransferAgent(const KvTransferConfig& config, model::KvCache& cache, int engine_index,
                                 Logger* logger)
    : config_(config), cache_(cache), engine_index_(engine_index), logger_(logger) {
    if (config_.produces()) {
        const int port = config_.port > 0 ? config_.port + engine_index : 0;
        server_ = std::make_unique<ipc::KvServerSocket>(fmt::format("tcp://{}:{}", config_.bind_host, port),
                                                        channel_options(config_));
        const std::string bound = server_->endpoint();  // tcp://bind_host:port
        const std::string host = config_.advertise_host.empty() ? config_.bind_host : config_.advertise_host;
        endpoint_ = fmt::format("tcp://{}:{}", host, bound.substr(bound.rfind(':') + 1));
        serve_thread_ = std::thread([this] { serve_loop(); });
    }
    if (config_.consumes()) {
        client_context_ = std::make_unique<ipc::KvClientContext>();
        for (int i = 0; i < kFetchWorkers; ++i) fetch_threads_.emplace_back([this] { fetch_loop(); });
    }
}

KvTransferAgent::~KvTransferAgent() {
    stop_ = true;
    jobs_cv_.notify_all();
    if (serve_thread_.joinable()) serve_thread_.join();
    for (auto& t : fetch_threads_) t.join();
    connections_.clear();  // the sockets before their context
}

void KvTransferAgent::log_error(const char* format, const std::string& a, const std::string& b) {
    if (logger_) MOESERVE_LOG_W(*logger_, "kv-transfer", "%s", fmt::format(fmt::runtime(format), a, b).c_str());
}

// ---- producer ----

void KvTransferAgent::publish(Published transfer) {
    transfer.meta.transfer_id = transfer.id;
    transfer.meta.layout = cache_.layout();
    transfer.meta.block_bytes = cache_.block_bytes();
    transfer.meta.num_blocks = static_cast<int32_t>(transfer.block_ids.size());
    std::lock_guard lock(mutex_);
    const std::string id = transfer.id;
    held_[id] = Held{std::move(transfer), steady_seconds(), false};
}

std::vector<std::string> KvTransferAgent::take_released() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    out.swap(released_);
    const double now = steady_seconds();
    for (auto it = held_.begin(); it != held_.end();) {
        if (!it->second.serving && now - it->second.published_at > config_.hold_ms / 1000.0) {
            out.push_back(it->first);
            ++counters_.expired_transfers;
            it = held_.erase(it);
        } else {
            ++it;
        }
    }
    return out;
}

void KvTransferAgent::serve_loop() {
    while (!stop_) {
        std::optional<ipc::KvIncoming> in;
        try {
            in = server_->receive(kPollMs);
        } catch (const Error& e) {
            log_error("skipping a malformed message: {}{}", e.what(), "");
            continue;
        }
        if (!in) continue;
        if (const auto* fetch = std::get_if<ipc::KvFetch>(&in->message)) {
            serve_fetch(in->peer, *fetch);
        } else if (const auto* release = std::get_if<ipc::KvRelease>(&in->message)) {
            std::lock_guard lock(mutex_);
            const auto it = held_.find(release->transfer_id);
            if (it != held_.end() && !it->second.serving) {
                held_.erase(it);
                released_.push_back(release->transfer_id);
            }
        }
    }
}

void KvTransferAgent::serve_fetch(const std::string& peer, const ipc::KvFetch& fetch) {
    const double start = steady_seconds();
    ipc::KvTransferMeta meta;
    std::vector<int32_t> blocks;
    {
        std::lock_guard lock(mutex_);
        const auto it = held_.find(fetch.transfer_id);
        if (it == held_.end()) {
            meta.error = fmt::format(
                "the prefill engine holds no KV for '{}' (never prefilled here, released, or "
                "expired after {} ms)",
                fetch.transfer_id, config_.hold_ms);
        } else {
            meta = it->second.transfer.meta;
            if (fetch.layout != meta.layout) {
                meta.error = fmt::format("KV layouts differ: the prefill engine has '{}', the decode engine '{}'",
                                         meta.layout, fetch.layout);
            } else if (fetch.skip_blocks < 0 || fetch.skip_blocks > meta.num_blocks) {
                meta.error = fmt::format("skip_blocks {} outside [0, {}]", fetch.skip_blocks, meta.num_blocks);
            } else {
                it->second.serving = true;
                blocks = it->second.transfer.block_ids;
            }
        }
    }
    meta.fetch = fetch.fetch;
    meta.transfer_id = fetch.transfer_id;
    const bool ok = meta.error.empty();
    bool sent = server_->send(peer, meta);
    int64_t bytes = 0;
    if (ok && sent) {
        const int64_t per_block = cache_.block_bytes();
        const auto per_chunk =
            static_cast<int32_t>(std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, per_block)));
        std::string payload;
        int32_t first = fetch.skip_blocks;
        do {  // at least one (maybe empty) chunk, the last flagged
            const int32_t count = std::min(per_chunk, meta.num_blocks - first);
            payload.resize(static_cast<size_t>(count * per_block));
            for (int32_t b = 0; b < count; ++b) {
                cache_.read_block(blocks[static_cast<size_t>(first) + static_cast<size_t>(b)],
                                  reinterpret_cast<std::byte*>(payload.data()) + b * per_block);
            }
            ipc::KvBlockChunk chunk{fetch.fetch, meta.transfer_id, first, count, first + count == meta.num_blocks};
            sent = server_->send(peer, chunk, payload);
            bytes += static_cast<int64_t>(payload.size());
            first += count;
        } while (sent && first < meta.num_blocks);
    }
    std::lock_guard lock(mutex_);
    if (ok) {
        const auto it = held_.find(fetch.transfer_id);
        if (it != held_.end()) it->second.serving = false;
        if (sent) {
            counters_.sent_bytes += bytes;
            ++counters_.sent_transfers;
            counters_.send_seconds += steady_seconds() - start;
        }
    }
    if (!sent) log_error("could not send the KV of '{}' to its decode engine{}", fetch.transfer_id, "");
}

// ---- consumer ----

void KvTransferAgent::fetch(FetchJob job) {
    {
        std::lock_guard lock(mutex_);
        jobs_.emplace_back(std::move(job), steady_seconds());
    }
    jobs_cv_.notify_one();
}

std::vector<KvTransferAgent::Fetched> KvTransferAgent::take_fetched() {
    std::lock_guard lock(mutex_);
    std::vector<Fetched> out;
    out.swap(fetched_);
    return out;
}

void KvTransferAgent::cancel(const std::string& id) {
    std::lock_guard lock(mutex_);
    cancelled_.insert(id);
}

bool KvTransferAgent::has_pending_fetches() const {
    std::lock_guard lock(mutex_);
    return !jobs_.empty() || running_fetches_ > 0;
}

KvTransferCounters KvTransferAgent::counters() const {
    std::lock_guard lock(mutex_);
    return counters_;
}

// The oldest queued job whose producer no other worker is fetching from (waiting up to a poll
// interval for one); nullopt to look at stop_ again. Closes idle connections meanwhile.
std::optional<std::pair<KvTransferAgent::FetchJob, double>> KvTransferAgent::next_job(
    std::unique_lock<std::mutex>& lock) {
    const auto runnable = [this] {
        return std::find_if(jobs_.begin(), jobs_.end(),
                            [this](const auto& j) { return busy_endpoints_.count(j.first.endpoint) == 0; });
    };
    jobs_cv_.wait_for(lock, std::chrono::milliseconds(kPollMs * 10),
                      [&] { return stop_ || runnable() != jobs_.end(); });
    evict_connections(kMaxConnections, steady_seconds());
    const auto it = runnable();
    if (stop_ || it == jobs_.end()) return std::nullopt;
    std::pair<FetchJob, double> job = std::move(*it);
    jobs_.erase(it);
    busy_endpoints_.insert(job.first.endpoint);
    ++running_fetches_;
    return job;
}

void KvTransferAgent::fetch_loop() {
    while (!stop_) {
        std::optional<std::pair<FetchJob, double>> next;
        {
            std::unique_lock lock(mutex_);
            next = next_job(lock);
        }
        if (!next) continue;
        const FetchJob& job = next->first;
        const double start = steady_seconds();
        Fetched result;
        result.id = job.id;
        try {
            result.error = run_fetch(job, result.meta);
        } catch (const Error& e) {
            result.error = e.what();
        }
        if (!result.error.empty()) log_error("request {}: {}", job.id, result.error);
        {
            std::lock_guard lock(mutex_);
            busy_endpoints_.erase(job.endpoint);
            cancelled_.erase(job.id);
            --running_fetches_;
            if (result.error.empty()) {
                ++counters_.received_transfers;
                counters_.received_bytes +=
                    static_cast<int64_t>(job.block_ids.size() - static_cast<size_t>(job.skip_blocks)) *
                    cache_.block_bytes();
                counters_.receive_seconds += steady_seconds() - start;
            } else {
                ++counters_.failed_transfers;
            }
            counters_.wait_seconds += steady_seconds() - next->second;
            fetched_.push_back(std::move(result));
        }
        jobs_cv_.notify_all();  // this producer's next job may run now
    }
}

// Closes connections nobody uses that have been idle too long, then the least recently used
// until at most keep are open.
void KvTransferAgent::evict_connections(size_t keep, double now) {
    for (auto it = connections_.begin(); it != connections_.end();) {
        const bool idle = !it->second.in_use && now - it->second.last_used > kIdleConnectionSeconds;
        it = idle ? connections_.erase(it) : std::next(it);
    }
    while (connections_.size() > keep) {
        auto oldest = connections_.end();
        for (auto it = connections_.begin(); it != connections_.end(); ++it) {
            if (!it->second.in_use && (oldest == connections_.end() || it->second.last_used < oldest->second.last_used))
                oldest = it;
        }
        if (oldest == connections_.end()) return;  // all in use (more workers than kMaxConnections)
        connections_.erase(oldest);
    }
}

// The connection to endpoint, opened if needed; nullptr with error set if its TCP port does not
// answer (a refused or dead producer fails its fetch at once instead of after timeout_ms).
ipc::KvClientSocket* KvTransferAgent::acquire_connection(const std::string& endpoint, std::string& error) {
    {
        std::lock_guard lock(mutex_);
        if (const auto it = connections_.find(endpoint); it != connections_.end()) {
            it->second.in_use = true;
            return it->second.socket.get();
        }
    }
    error = ipc::probe_kv_endpoint(endpoint, std::min(kProbeMs, config_.timeout_ms));
    if (!error.empty()) return nullptr;
    auto socket = std::make_unique<ipc::KvClientSocket>(*client_context_, endpoint, channel_options(config_));
    std::lock_guard lock(mutex_);
    evict_connections(kMaxConnections - 1, steady_seconds());
    Connection& c = connections_[endpoint];
    c = Connection{std::move(socket), steady_seconds(), true};
    return c.socket.get();
}

// A connection whose fetch failed is closed: the next fetch from that producer starts afresh.
void KvTransferAgent::release_connection(const std::string& endpoint, bool healthy) {
    std::lock_guard lock(mutex_);
    const auto it = connections_.find(endpoint);
    if (it == connections_.end()) return;
    if (!healthy) {
        connections_.erase(it);
        return;
    }
    it->second.in_use = false;
    it->second.last_used = steady_seconds();
}

// Fetches one request's blocks into the cache. Returns "" on success, else why it failed.
std::string KvTransferAgent::run_fetch(const FetchJob& job, ipc::KvTransferMeta& meta) {
    {
        std::lock_guard lock(mutex_);
        if (stop_ || cancelled_.count(job.id) > 0) return "aborted before its KV transfer started";
    }
    std::string error;
    ipc::KvClientSocket* socket = acquire_connection(job.endpoint, error);
    if (socket == nullptr) {
        return fmt::format("KV transfer from the prefill engine at {}: cannot connect ({})", job.endpoint, error);
    }
    try {
        error = run_fetch_on(*socket, job, meta);
    } catch (...) {
        release_connection(job.endpoint, false);
        throw;
    }
    release_connection(job.endpoint, error.empty());
    return error;
}

// The fetch itself, on a connection this worker holds.
std::string KvTransferAgent::run_fetch_on(ipc::KvClientSocket& socket, const FetchJob& job, ipc::KvTransferMeta& meta) {
    const auto is_cancelled = [this, &job] {
        std::lock_guard lock(mutex_);
        return stop_ || cancelled_.count(job.id) > 0;
    };
    const std::string from = fmt::format("KV transfer from the prefill engine at {}", job.endpoint);
    const uint64_t fetch = ++num_fetches_;
    if (!socket.send(ipc::KvFetch{fetch, job.remote_id, cache_.layout(), job.skip_blocks}))
        return fmt::format("{}: could not send the request (is that instance running?)", from);
    const auto release = [&] { (void)socket.send(ipc::KvRelease{job.remote_id}); };
    const int64_t per_block = cache_.block_bytes();
    bool have_meta = false;
    int32_t next_block = job.skip_blocks;
    double last_progress = steady_seconds();
    while (true) {
        if (is_cancelled()) {
            release();
            return "aborted during its KV transfer";
        }
        if (steady_seconds() - last_progress > config_.timeout_ms / 1000.0) {
            return fmt::format("{}: nothing arrived for {} ms (the prefill instance is gone or stuck)", from,
                               config_.timeout_ms);
        }
        std::optional<ipc::KvIncoming> in = socket.receive(kPollMs);
        if (!in) continue;
        // A late message of an earlier fetch on this socket (one given up on): not ours.
        if (const auto* m = std::get_if<ipc::KvTransferMeta>(&in->message)) {
            if (m->fetch != fetch) continue;
            last_progress = steady_seconds();
            if (!m->error.empty()) return fmt::format("{}: {}", from, m->error);
            const auto expected = static_cast<int32_t>(job.block_ids.size());
            if (m->num_blocks != expected || m->block_bytes != per_block) {
                release();
                return fmt::format("{}: it sends {} blocks of {} bytes, this request needs {} of {}", from,
                                   m->num_blocks, m->block_bytes, expected, per_block);
            }
            if (m->prompt_token_ids != job.prompt_token_ids) {
                release();
                return fmt::format("{}: the prompt it prefilled ({} tokens) is not this request's ({} tokens)", from,
                                   m->prompt_token_ids.size(), job.prompt_token_ids.size());
            }
            meta = *m;
            have_meta = true;
        } else if (const auto* c = std::get_if<ipc::KvBlockChunk>(&in->message)) {
            if (c->fetch != fetch) continue;
            if (!have_meta || c->first_block != next_block || c->num_blocks < 0 ||
                c->first_block + c->num_blocks > static_cast<int32_t>(job.block_ids.size()) ||
                static_cast<int64_t>(in->payload.size()) != c->num_blocks * per_block) {
                release();
                return fmt::format("{}: a malformed block chunk (blocks {}+{}, {} bytes)", from, c->first_block,
                                   c->num_blocks, in->payload.size());
            }
            last_progress = steady_seconds();
            for (int32_t b = 0; b < c->num_blocks; ++b) {
                cache_.write_block(job.block_ids[static_cast<size_t>(c->first_block) + static_cast<size_t>(b)],
                                   reinterpret_cast<const std::byte*>(in->payload.data()) + b * per_block);
            }
            next_block += c->num_blocks;
            if (c->last) {
                release();
                if (next_block != static_cast<int32_t>(job.block_ids.size()))
                    return fmt::format("{}: it ended after block {} of {}", from, next_block, job.block_ids.size());
                return "";
            }
        }
    }
}

}  // namespace moeserve::engine
