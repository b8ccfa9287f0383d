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
// Producer: while it serves fetches, the serve thread looks for progress this often, tells each
// consumer its transfer's progress at least this often (a long prefill is not silence), and
// sends at most this many chunks per fetch at a time (the others' turn comes between).
constexpr int kSessionPollMs = 1;
constexpr double kProgressSeconds = 0.25;
constexpr int kChunksPerPump = 4;

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

std::vector<KvPiece> plan_pieces(const model::KvSlice& mine, const std::vector<ipc::KvRankSlice>& ranks, int tp_rank) {
    std::vector<KvPiece> pieces;
    for (int64_t part = mine.first; part < mine.first + mine.count; ++part) {
        std::vector<const ipc::KvRankSlice*> holders;
        for (const auto& r : ranks) {
            if (part >= r.first_part && part < r.first_part + r.num_parts) holders.push_back(&r);
        }
        if (holders.empty()) return {};
        const ipc::KvRankSlice& from = *holders[static_cast<size_t>(tp_rank) % holders.size()];
        if (!pieces.empty() && pieces.back().endpoint == from.endpoint &&
            pieces.back().first + pieces.back().count == part) {
            ++pieces.back().count;
        } else {
            pieces.push_back({from.endpoint, part, 1});
        }
    }
    return pieces;
}

KvTransferAgent::KvTransferAgent(const KvTransferConfig& config, model::KvCache& cache, int port_offset, int tp_rank,
                                 Logger* logger)
    : config_(config), cache_(cache), tp_rank_(tp_rank), logger_(logger) {
    if (config_.produces()) {
        const int port = config_.port > 0 ? config_.port + port_offset : 0;
        server_ = std::make_unique<ipc::KvServerSocket>(fmt::format("tcp://{}:{}", config_.bind_host, port),
                                                        channel_options(config_));
        const std::string bound = server_->endpoint();  // tcp://bind_host:port
        const std::string host = config_.advertise_host.empty() ? config_.bind_host : config_.advertise_host;
        endpoint_ = fmt::format("tcp://{}:{}", host, bound.substr(bound.rfind(':') + 1));
        const model::KvSlice mine = cache_.slice();
        ranks_ = {{endpoint_, static_cast<int32_t>(mine.first), static_cast<int32_t>(mine.count)}};
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
    transfer.meta.num_blocks = static_cast<int32_t>(transfer.block_ids.size());
    transfer.meta.block_ids = transfer.block_ids;
    transfer.meta.hold_ms = config_.hold_ms;
    transfer.meta.computed_blocks = transfer.meta.num_blocks;
    transfer.meta.done = true;
    std::lock_guard lock(mutex_);
    const auto started = held_.find(transfer.id);
    transfer.meta.generation = started != held_.end() ? started->second.transfer.meta.generation : generation_.load();
    Held& h = held_[transfer.id];  // a streamed transfer completes; sessions keep their count
    h.computed_blocks = transfer.meta.num_blocks;
    h.transfer = std::move(transfer);
    h.published_at = steady_seconds();
    h.done = true;
    release_if_asked(held_.find(h.transfer.id));  // its consumer gave up while it prefilled
}

bool KvTransferAgent::release_if_asked(std::unordered_map<std::string, Held>::iterator it) {
    const Held& h = it->second;
    if (!h.release_asked || !h.done || h.sessions > 0) return false;
    released_.push_back(it->first);
    held_.erase(it);
    return true;
}

void KvTransferAgent::publish_started(const std::string& id, const std::vector<ipc::TokenId>& prompt_token_ids) {
    Held h;
    h.transfer.id = id;
    ipc::KvTransferMeta& m = h.transfer.meta;
    m.transfer_id = id;
    m.layout = cache_.layout();
    m.prompt_token_ids = prompt_token_ids;
    m.num_blocks = static_cast<int32_t>((static_cast<int64_t>(prompt_token_ids.size()) + cache_.block_size() - 1) /
                                        cache_.block_size());
    m.hold_ms = config_.hold_ms;
    m.done = false;
    m.generation = generation_;
    h.done = false;
    std::lock_guard lock(mutex_);
    held_[id] = std::move(h);
}

void KvTransferAgent::progress(const std::string& id, const std::vector<int32_t>& block_ids, int32_t computed_blocks) {
    std::lock_guard lock(mutex_);
    const auto it = held_.find(id);
    if (it == held_.end() || it->second.done) return;
    it->second.transfer.block_ids = block_ids;
    it->second.computed_blocks = std::min(computed_blocks, static_cast<int32_t>(block_ids.size()));
}

void KvTransferAgent::fail_published(const std::string& id, const std::string& reason) {
    std::lock_guard lock(mutex_);  // a session reading its blocks finishes first
    const auto it = held_.find(id);
    if (it == held_.end()) return;
    if (it->second.sessions == 0) {
        held_.erase(it);
    } else {
        it->second.error = reason;  // the sessions tell their consumers, then it goes
    }
}

std::vector<std::string> KvTransferAgent::take_released() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    out.swap(released_);
    const double now = steady_seconds();
    for (auto it = held_.begin(); it != held_.end();) {
        const Held& h = it->second;
        if (h.done && h.sessions == 0 && now - h.published_at > config_.hold_ms / 1000.0) {
            out.push_back(it->first);
            ++counters_.expired_transfers;
            it = held_.erase(it);
        } else {
            ++it;
        }
    }
    return out;
}

void KvTransferAgent::set_ranks(std::vector<ipc::KvRankSlice> ranks) {
    std::lock_guard lock(mutex_);
    ranks_ = std::move(ranks);
}

void KvTransferAgent::drop_published() {
    std::lock_guard lock(mutex_);
    for (auto it = held_.begin(); it != held_.end();) {
        Held& h = it->second;
        if (!h.done && h.sessions == 0) {  // the scheduler's request still: nothing to free here
            it = held_.erase(it);
        } else if (!h.done) {  // its consumers learn it is gone
            h.error = "the prefill instance's TP group re-formed";
            ++it;
        } else if (h.sessions > 0) {
            h.dropped = true;
            h.error = "the prefill instance's TP group re-formed";
            ++it;
        } else {
            released_.push_back(it->first);
            it = held_.erase(it);
        }
    }
}

void KvTransferAgent::serve_loop() {
    while (!stop_) {
        std::optional<ipc::KvIncoming> in;
        try {
            in = server_->receive(sessions_.empty() ? kPollMs : kSessionPollMs);
        } catch (const Error& e) {
            log_error("skipping a malformed message: {}{}", e.what(), "");
        }
        if (in) {
            if (const auto* fetch = std::get_if<ipc::KvFetch>(&in->message)) {
                if (fetch->block_ids.empty()) {
                    sessions_.push_back(Session{in->peer, *fetch});
                    sessions_.back().next_block = fetch->skip_blocks;
                    sessions_.back().began = steady_seconds();
                } else {
                    serve_named_blocks(in->peer, *fetch);
                }
            } else if (const auto* release = std::get_if<ipc::KvRelease>(&in->message)) {
                std::lock_guard lock(mutex_);
                const auto it = held_.find(release->transfer_id);
                if (it != held_.end()) {
                    it->second.release_asked = true;  // now, or once its prefill and sessions end
                    release_if_asked(it);
                }
            }
        }
        std::erase_if(sessions_, [this](Session& s) { return !pump(s); });
    }
}

bool KvTransferAgent::holds(int64_t first_part, int64_t num_parts) const {
    const model::KvSlice mine = cache_.slice();
    return num_parts > 0 && first_part >= mine.first && first_part + num_parts <= mine.first + mine.count;
}

void KvTransferAgent::serve_named_blocks(const std::string& peer, const ipc::KvFetch& fetch) {
    ipc::KvTransferMeta meta;
    meta.fetch = fetch.fetch;
    meta.transfer_id = fetch.transfer_id;
    meta.layout = cache_.layout();
    meta.num_blocks = static_cast<int32_t>(fetch.block_ids.size());
    const model::KvSlice mine = cache_.slice();
    if (fetch.generation != generation_) {  // the blocks it names are another group's
        meta.error = fmt::format("the prefill instance's TP group re-formed since (generation {}, now {})",
                                 fetch.generation, generation_.load());
    } else if (fetch.layout != meta.layout) {
        meta.error = fmt::format("KV layouts differ: the prefill engine has '{}', the decode engine '{}'", meta.layout,
                                 fetch.layout);
    } else if (!holds(fetch.first_part, fetch.num_parts)) {
        meta.error = fmt::format("this prefill rank holds KV parts [{}, {}), not [{}, {})", mine.first,
                                 mine.first + mine.count, fetch.first_part, fetch.first_part + fetch.num_parts);
    } else if (fetch.skip_blocks < 0 || fetch.skip_blocks > meta.num_blocks) {
        meta.error = fmt::format("skip_blocks {} outside [0, {}]", fetch.skip_blocks, meta.num_blocks);
    }
    for (const int32_t b : fetch.block_ids) {
        if (b <= 0 || b >= cache_.num_blocks()) meta.error = fmt::format("KV block {} does not exist here", b);
    }
    if (!meta.error.empty()) {
        (void)server_->send(peer, meta);
        return;
    }
    meta.block_bytes = fetch.num_parts * cache_.part_bytes();
    meta.computed_blocks = meta.num_blocks;
    bool sent = server_->send(peer, meta);
    const int64_t local_first = fetch.first_part - mine.first;
    const auto per_chunk =
        static_cast<int32_t>(std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, meta.block_bytes)));
    std::string payload;
    (void)forwards_done_.load(std::memory_order_acquire);  // the forwards that wrote these blocks (forward_done)
    for (int32_t first = fetch.skip_blocks; sent && first < meta.num_blocks;) {
        const int32_t count = std::min(per_chunk, meta.num_blocks - first);
        payload.resize(static_cast<size_t>(count * meta.block_bytes));
        for (int32_t b = 0; b < count; ++b) {
            cache_.read_parts(fetch.block_ids[static_cast<size_t>(first) + static_cast<size_t>(b)], local_first,
                              fetch.num_parts, reinterpret_cast<std::byte*>(payload.data()) + b * meta.block_bytes);
        }
        sent = server_->send(
            peer, ipc::KvBlockChunk{fetch.fetch, fetch.transfer_id, first, count, first + count == meta.num_blocks},
            payload);
        first += count;
    }
    if (!sent) log_error("could not send KV blocks of '{}' to its decode engine{}", fetch.transfer_id, "");
}

ipc::KvTransferMeta KvTransferAgent::progress_meta(const Session& s, const Held& h) const {
    ipc::KvTransferMeta m = h.transfer.meta;
    m.fetch = s.fetch.fetch;
    m.block_ids = h.transfer.block_ids;
    m.computed_blocks = h.computed_blocks;
    m.done = h.done;
    m.ranks = ranks_;  // m.generation: the group's when the prefill started (its blocks are that group's)
    m.block_bytes = s.chunks ? s.fetch.num_parts * cache_.part_bytes() : 0;
    if (!h.done) {  // not known yet
        m.first_logprobs.reset();
        m.prompt_logprobs.reset();
    }
    return m;
}

std::optional<KvTransferAgent::Outgoing> KvTransferAgent::next_chunk(Session& s, const Held& h) {
    const int32_t num_blocks = h.transfer.meta.num_blocks;
    const int32_t ready = std::min(h.computed_blocks, num_blocks);
    if (!s.chunks || s.next_block >= ready) return std::nullopt;
    const int64_t per_block = s.fetch.num_parts * cache_.part_bytes();
    const auto per_chunk = static_cast<int32_t>(std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, per_block)));
    const int32_t count = std::min(per_chunk, ready - s.next_block);
    Outgoing o{
        ipc::KvBlockChunk{s.fetch.fetch, s.fetch.transfer_id, s.next_block, count, s.next_block + count == num_blocks},
        std::string(static_cast<size_t>(count * per_block), '\0')};
    const int64_t local_first = s.fetch.first_part - cache_.slice().first;
    for (int32_t b = 0; b < count; ++b) {
        cache_.read_parts(h.transfer.block_ids[static_cast<size_t>(s.next_block) + static_cast<size_t>(b)], local_first,
                          s.fetch.num_parts, reinterpret_cast<std::byte*>(o.payload.data()) + b * per_block);
    }
    s.next_block += count;
    s.bytes += static_cast<int64_t>(o.payload.size());
    return o;
}

// Under mutex_, so that the engine cannot give the blocks up while they are read.
bool KvTransferAgent::prepare_pump(Session& s, std::vector<Outgoing>& out) {
    std::lock_guard lock(mutex_);
    const auto it = held_.find(s.fetch.transfer_id);
    ipc::KvTransferMeta refusal;
    refusal.fetch = s.fetch.fetch;
    refusal.transfer_id = s.fetch.transfer_id;
    if (it == held_.end()) {
        refusal.error = fmt::format(
            "the prefill engine holds no KV for '{}' (never prefilled here, released, or expired after {} ms)",
            s.fetch.transfer_id, config_.hold_ms);
    } else if (!it->second.error.empty()) {
        refusal.error = "the prefill instance gave the request up: " + it->second.error;
    } else if (!s.started && s.fetch.layout != it->second.transfer.meta.layout) {
        refusal.error = fmt::format("KV layouts differ: the prefill engine has '{}', the decode engine '{}'",
                                    it->second.transfer.meta.layout, s.fetch.layout);
    } else if (!s.started && (s.fetch.skip_blocks < 0 || s.fetch.skip_blocks > it->second.transfer.meta.num_blocks)) {
        refusal.error =
            fmt::format("skip_blocks {} outside [0, {}]", s.fetch.skip_blocks, it->second.transfer.meta.num_blocks);
    }
    if (!refusal.error.empty()) {
        out.push_back({refusal, {}});
        return true;
    }
    Held& h = it->second;
    const double now = steady_seconds();
    if (!s.started) {
        s.started = true;
        s.chunks = holds(s.fetch.first_part, s.fetch.num_parts);
        ++h.sessions;
        if (h.done) h.published_at = now;  // the other ranks' reads are leased from now
    }
    if (s.computed_sent != h.computed_blocks || s.done_sent != h.done || now - s.last_sent >= kProgressSeconds) {
        out.push_back({progress_meta(s, h), {}});
        s.computed_sent = h.computed_blocks;
        s.done_sent = h.done;
        s.last_sent = now;
    }
    for (int i = 0; i < kChunksPerPump; ++i) {
        std::optional<Outgoing> chunk = next_chunk(s, h);
        if (!chunk) break;
        out.push_back(std::move(*chunk));
    }
    return h.done && s.done_sent && (!s.chunks || s.next_block >= h.transfer.meta.num_blocks);
}

bool KvTransferAgent::pump(Session& s) {
    std::vector<Outgoing> out;
    const bool was_started = s.started;
    bool ends = prepare_pump(s, out);
    bool sent = true;
    for (auto& o : out) {
        if (sent) sent = server_->send(s.peer, o.message, o.payload);
    }
    const auto* meta = out.empty() ? nullptr : std::get_if<ipc::KvTransferMeta>(&out.front().message);
    const bool refused = meta != nullptr && !meta->error.empty();
    if (!sent) log_error("could not send the KV of '{}' to its decode engine{}", s.fetch.transfer_id, "");
    if (!ends && sent && !refused) return true;
    if (was_started || s.started) end_session(s, ends && sent && !refused);
    return false;
}

void KvTransferAgent::end_session(const Session& s, bool completed) {
    std::lock_guard lock(mutex_);
    const auto it = held_.find(s.fetch.transfer_id);
    if (it != held_.end()) {
        Held& h = it->second;
        --h.sessions;
        if (!release_if_asked(it) && h.sessions == 0 && (h.dropped || (!h.error.empty() && !h.done))) {
            if (h.dropped) released_.push_back(it->first);  // done blocks the scheduler still holds
            held_.erase(it);
        }
    }
    if (completed && s.chunks) {
        counters_.sent_bytes += s.bytes;
        ++counters_.sent_transfers;
        counters_.send_seconds += steady_seconds() - s.began;
    }
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
    const bool queued = std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& j) { return j.first.id == id; });
    if (queued || running_.count(id) > 0) cancelled_.insert(id);
}

bool KvTransferAgent::has_pending_fetches() const {
    std::lock_guard lock(mutex_);
    return !jobs_.empty() || !running_.empty();
}

KvTransferCounters KvTransferAgent::counters() const {
    std::lock_guard lock(mutex_);
    return counters_;
}

void KvTransferAgent::release(const std::string& endpoint, const std::string& remote_id) {
    {
        std::lock_guard lock(mutex_);
        releases_.emplace_back(endpoint, remote_id);
    }
    jobs_cv_.notify_one();
}

// A worker's: best effort (a producer that does not hear it frees the blocks after hold_ms).
void KvTransferAgent::send_release(const std::string& endpoint, const std::string& remote_id) {
    std::string error;
    Connection* c = acquire_connection(endpoint, error);
    if (c == nullptr) return;
    const bool sent = c->socket->send(ipc::KvRelease{remote_id});
    release_connection(c, sent);
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
                      [&] { return stop_ || !releases_.empty() || runnable() != jobs_.end(); });
    evict_connections(kMaxConnections, steady_seconds());
    const auto it = runnable();
    if (stop_ || it == jobs_.end()) return std::nullopt;
    std::pair<FetchJob, double> job = std::move(*it);
    jobs_.erase(it);
    busy_endpoints_.insert(job.first.endpoint);
    running_.insert(job.first.id);
    return job;
}

void KvTransferAgent::fetch_loop() {
    while (!stop_) {
        std::optional<std::pair<FetchJob, double>> next;
        std::optional<std::pair<std::string, std::string>> release;
        {
            std::unique_lock lock(mutex_);
            next = next_job(lock);
            if (!next && !releases_.empty()) {
                release = std::move(releases_.front());
                releases_.pop_front();
            }
        }
        if (release) send_release(release->first, release->second);
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
        finish_job(job, next->second, start, std::move(result));
        jobs_cv_.notify_all();  // this producer's next job may run now
    }
}

void KvTransferAgent::finish_job(const FetchJob& job, double queued_at, double started_at, Fetched result) {
    std::lock_guard lock(mutex_);
    busy_endpoints_.erase(job.endpoint);
    cancelled_.erase(job.id);
    running_.erase(job.id);
    const double now = steady_seconds();
    if (result.error.empty()) {
        ++counters_.received_transfers;
        counters_.received_bytes +=
            static_cast<int64_t>(job.block_ids.size() - static_cast<size_t>(job.skip_blocks)) * cache_.block_bytes();
        counters_.receive_seconds += now - started_at;
    } else {
        ++counters_.failed_transfers;
    }
    counters_.wait_seconds += now - queued_at;
    fetched_.push_back(std::move(result));
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

KvTransferAgent::Connection* KvTransferAgent::acquire_connection(const std::string& endpoint, std::string& error) {
    {
        std::lock_guard lock(mutex_);
        const auto [begin, end] = connections_.equal_range(endpoint);
        for (auto it = begin; it != end; ++it) {
            if (it->second.in_use) continue;
            it->second.in_use = true;
            return &it->second;
        }
    }
    error = ipc::probe_kv_endpoint(endpoint, std::min(kProbeMs, config_.timeout_ms));
    if (!error.empty()) return nullptr;
    auto socket = std::make_unique<ipc::KvClientSocket>(*client_context_, endpoint, channel_options(config_));
    std::lock_guard lock(mutex_);
    evict_connections(kMaxConnections - 1, steady_seconds());
    const auto it = connections_.emplace(endpoint, Connection{std::move(socket), steady_seconds(), true});
    return &it->second;
}

// A connection whose fetch failed is closed: the next fetch from that producer starts afresh.
void KvTransferAgent::release_connection(Connection* connection, bool healthy) {
    std::lock_guard lock(mutex_);
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
        if (&it->second != connection) continue;
        if (!healthy) {
            connections_.erase(it);
        } else {
            it->second.in_use = false;
            it->second.last_used = steady_seconds();
        }
        return;
    }
}

bool KvTransferAgent::is_cancelled(const std::string& id) {
    std::lock_guard lock(mutex_);
    return stop_ || cancelled_.count(id) > 0;
}

// Fetches one request's parts into the cache. Returns "" on success, else why it failed.
std::string KvTransferAgent::run_fetch(const FetchJob& job, ipc::KvTransferMeta& meta) {
    if (is_cancelled(job.id)) return "aborted before its KV transfer started";
    std::string error;
    Connection* connection = acquire_connection(job.endpoint, error);
    if (connection == nullptr) {
        return fmt::format("KV transfer from the prefill engine at {}: cannot connect ({})", job.endpoint, error);
    }
    try {
        error = run_fetch_on(*connection->socket, job, meta);
    } catch (...) {
        release_connection(connection, false);
        throw;
    }
    release_connection(connection, error.empty());
    return error;
}

// The fetch itself, on a connection to the producer's rank 0 this worker holds: its metadata
// and progress (with this rank's parts as chunks, when it holds them all), else each part range
// from a rank that holds it.
std::string KvTransferAgent::run_fetch_on(ipc::KvClientSocket& socket, const FetchJob& job, ipc::KvTransferMeta& meta) {
    const std::string from = fmt::format("KV transfer from the prefill engine at {}", job.endpoint);
    const model::KvSlice mine = cache_.slice();
    const ipc::KvFetch request{++num_fetches_,
                               job.remote_id,
                               cache_.layout(),
                               job.skip_blocks,
                               static_cast<int32_t>(mine.first),
                               static_cast<int32_t>(mine.count),
                               {},
                               0};
    if (!socket.send(request)) return fmt::format("{}: could not send the request (is that instance running?)", from);
    std::string error = follow(socket, request, job, from, meta);
    // Unless it refused this consumer (another may still fetch them), the producer may free the
    // blocks now.
    if (job.release && meta.error.empty()) (void)socket.send(ipc::KvRelease{job.remote_id});
    return error;
}

std::string KvTransferAgent::follow(ipc::KvClientSocket& socket, const ipc::KvFetch& request, const FetchJob& job,
                                    const std::string& from, ipc::KvTransferMeta& meta) {
    const auto num_blocks = static_cast<int32_t>(job.block_ids.size());
    const int64_t per_block = request.num_parts * cache_.part_bytes();
    bool have_meta = false;
    int32_t next = job.skip_blocks;  // the next block to arrive
    double done_at = 0;
    while (true) {
        if (have_meta && meta.block_bytes == 0 && std::min(meta.computed_blocks, num_blocks) > next) {
            const int32_t upto = std::min(meta.computed_blocks, num_blocks);
            if (std::string e = fetch_pieces(job, meta, next, upto); !e.empty()) return e;
            next = upto;
        }
        if (have_meta && meta.done && next >= num_blocks) break;
        std::string error;
        const std::optional<ipc::KvIncoming> in = await(socket, request.fetch, job, from, error);
        if (!in) return error;
        if (const auto* m = std::get_if<ipc::KvTransferMeta>(&in->message)) {
            meta = *m;
            if (!m->error.empty()) return fmt::format("{}: {}", from, m->error);
            if (m->num_blocks != num_blocks || (m->block_bytes != 0 && m->block_bytes != per_block)) {
                return fmt::format("{}: it sends {} blocks of {} bytes, this request needs {} of {}", from,
                                   m->num_blocks, m->block_bytes, num_blocks, per_block);
            }
            if (!have_meta && m->prompt_token_ids != job.prompt_token_ids) {
                return fmt::format("{}: the prompt it prefilled ({} tokens) is not this request's ({} tokens)", from,
                                   m->prompt_token_ids.size(), job.prompt_token_ids.size());
            }
            have_meta = true;
            if (m->done && done_at == 0) done_at = steady_seconds();
        } else if (!have_meta || meta.block_bytes == 0) {
            return fmt::format("{}: a block chunk it was not asked for", from);
        } else if (std::string e = write_chunk(*in, request, job, num_blocks, next, from); !e.empty()) {
            return e;
        }
    }
    if (steady_seconds() - done_at > meta.hold_ms / 1000.0) {
        return fmt::format("{}: it took longer than the prefill instance holds KV ({} ms)", from, meta.hold_ms);
    }
    return "";
}

std::string KvTransferAgent::fetch_pieces(const FetchJob& job, const ipc::KvTransferMeta& meta, int32_t from_block,
                                          int32_t upto) {
    const model::KvSlice mine = cache_.slice();
    const std::vector<KvPiece> pieces = plan_pieces(mine, meta.ranks, tp_rank_);
    if (pieces.empty()) {
        return fmt::format(
            "KV transfer from the prefill engine at {}: none of its {} ranks holds KV part(s) of [{}, {})",
            job.endpoint, meta.ranks.size(), mine.first, mine.first + mine.count);
    }
    if (static_cast<int32_t>(meta.block_ids.size()) < upto) {
        return fmt::format("KV transfer from the prefill engine at {}: {} blocks computed, {} named", job.endpoint,
                           upto, meta.block_ids.size());
    }
    for (const KvPiece& piece : pieces) {
        const std::string from = fmt::format("KV transfer from the prefill rank at {}", piece.endpoint);
        std::string error;
        Connection* connection = acquire_connection(piece.endpoint, error);
        if (connection == nullptr) return fmt::format("{}: cannot connect ({})", from, error);
        const ipc::KvFetch request{++num_fetches_,
                                   job.remote_id,
                                   cache_.layout(),
                                   from_block,
                                   static_cast<int32_t>(piece.first),
                                   static_cast<int32_t>(piece.count),
                                   {meta.block_ids.begin(), meta.block_ids.begin() + upto},
                                   meta.generation};
        try {
            error = exchange(*connection->socket, request, job, from);
        } catch (...) {
            release_connection(connection, false);
            throw;
        }
        release_connection(connection, error.empty());
        if (!error.empty()) return error;
    }
    return "";
}

std::optional<ipc::KvIncoming> KvTransferAgent::await(ipc::KvClientSocket& socket, uint64_t fetch, const FetchJob& job,
                                                      const std::string& from, std::string& error) {
    const double start = steady_seconds();
    while (true) {
        if (is_cancelled(job.id)) {
            error = "aborted during its KV transfer";
            return std::nullopt;
        }
        if (steady_seconds() - start > config_.timeout_ms / 1000.0) {
            error = fmt::format("{}: nothing arrived for {} ms (the prefill instance is gone or stuck)", from,
                                config_.timeout_ms);
            return std::nullopt;
        }
        std::optional<ipc::KvIncoming> in = socket.receive(kPollMs);
        if (!in) continue;
        // A late message of an earlier fetch on this socket (one given up on): not ours.
        const uint64_t number = std::visit(
            [](const auto& m) -> uint64_t {
                if constexpr (requires { m.fetch; }) {
                    return m.fetch;
                } else {
                    return 0;
                }
            },
            in->message);
        if (number == fetch) return in;
    }
}

// A part range of named blocks from one producer rank: its metadata, then every chunk.
std::string KvTransferAgent::exchange(ipc::KvClientSocket& socket, const ipc::KvFetch& request, const FetchJob& job,
                                      const std::string& from) {
    if (!socket.send(request)) return fmt::format("{}: could not send the request (is that instance running?)", from);
    std::string error;
    const std::optional<ipc::KvIncoming> in = await(socket, request.fetch, job, from, error);
    if (!in) return error;
    const auto* m = std::get_if<ipc::KvTransferMeta>(&in->message);
    if (m == nullptr) return fmt::format("{}: a block chunk came before the metadata", from);
    if (!m->error.empty()) return fmt::format("{}: {}", from, m->error);
    const auto expected = static_cast<int32_t>(request.block_ids.size());
    const int64_t per_block = request.num_parts * cache_.part_bytes();
    if (m->num_blocks != expected || m->block_bytes != per_block) {
        return fmt::format("{}: it sends {} blocks of {} bytes, this request needs {} of {}", from, m->num_blocks,
                           m->block_bytes, expected, per_block);
    }
    int32_t next = request.skip_blocks;
    while (next < expected) {
        const std::optional<ipc::KvIncoming> chunk = await(socket, request.fetch, job, from, error);
        if (!chunk) return error;
        if (std::string e = write_chunk(*chunk, request, job, expected, next, from); !e.empty()) return e;
    }
    return "";
}

std::string KvTransferAgent::write_chunk(const ipc::KvIncoming& in, const ipc::KvFetch& request, const FetchJob& job,
                                         int32_t num_blocks, int32_t& next, const std::string& from) {
    const int64_t per_block = request.num_parts * cache_.part_bytes();
    const int64_t local_first = request.first_part - cache_.slice().first;
    const auto* c = std::get_if<ipc::KvBlockChunk>(&in.message);
    if (c == nullptr || c->first_block != next || c->num_blocks <= 0 || c->first_block + c->num_blocks > num_blocks ||
        static_cast<int64_t>(in.payload.size()) != c->num_blocks * per_block) {
        return fmt::format("{}: a malformed block chunk (blocks {}+{}, {} bytes)", from, c ? c->first_block : -1,
                           c ? c->num_blocks : -1, in.payload.size());
    }
    for (int32_t b = 0; b < c->num_blocks; ++b) {
        cache_.write_parts(job.block_ids[static_cast<size_t>(c->first_block) + static_cast<size_t>(b)], local_first,
                           request.num_parts, reinterpret_cast<const std::byte*>(in.payload.data()) + b * per_block);
    }
    next += c->num_blocks;
    return "";
}

}  // namespace moeserve::engine
