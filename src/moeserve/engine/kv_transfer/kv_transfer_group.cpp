#include "moeserve/engine/kv_transfer/kv_transfer_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "moeserve/core/clock.h"
#include "moeserve/core/error.h"

namespace moeserve::engine {

namespace {

// The leader asks its followers about fetches its own rank has finished at most this often.
constexpr double kFollowerPollSeconds = 0.001;

// One rank's entry of the endpoint exchange (fixed size: all_gather).
struct RankRecord {
    char endpoint[496];
    int32_t first_part;
    int32_t num_parts;
};

// Collective over the TP group: every rank's endpoint and parts, in rank order ("" endpoint: a
// rank that serves no KV).
std::vector<ipc::KvRankSlice> gather_ranks(parallel::Communicator& comm, const std::string& endpoint,
                                           const model::KvSlice& slice) {
    RankRecord mine{};
    MOESERVE_CHECK(endpoint.size() < sizeof(mine.endpoint), "KV endpoint '{}' is too long", endpoint);
    std::memcpy(mine.endpoint, endpoint.data(), endpoint.size());
    mine.first_part = static_cast<int32_t>(slice.first);
    mine.num_parts = static_cast<int32_t>(slice.count);
    std::vector<RankRecord> all(static_cast<size_t>(comm.size()));
    comm.all_gather(std::span<const RankRecord>(&mine, 1), std::span<RankRecord>(all));
    std::vector<ipc::KvRankSlice> out;
    for (const RankRecord& r : all) {
        const std::string e(r.endpoint, strnlen(r.endpoint, sizeof(r.endpoint)));
        if (!e.empty()) out.push_back({e, r.first_part, r.num_parts});
    }
    return out;
}

KvTransferAgent::FetchJob job_of(const ipc::TpKvFetchJob& j) {
    return {j.id, j.endpoint, j.remote_id, j.block_ids, j.skip_blocks, j.prompt_token_ids, /*release=*/false};
}

}  // namespace

KvTransferGroup::KvTransferGroup(const KvTransferConfig& config, model::KvCache& cache, int engine_index,
                                 TpKvLink* link, Logger* logger)
    : agent_(config, cache, kv_port_offset(engine_index, link ? link->tp_comm().size() : 1, 0), 0, logger),
      link_(link) {
    if (link_ != nullptr) {
        generation_ = link_->kv_generation();
        exchange_ranks();
    }
}

void KvTransferGroup::exchange_ranks() {
    link_->announce(ipc::TpKvExchange{generation_});
    agent_.set_generation(generation_);
    std::vector<ipc::KvRankSlice> ranks = gather_ranks(link_->tp_comm(), agent_.endpoint(), agent_.slice());
    if (config().produces()) agent_.set_ranks(std::move(ranks));
}

// The followers started over with new caches: the KV they held for published transfers is
// gone, and so are their parts of running fetches.
void KvTransferGroup::follow_regroup() {
    if (link_ == nullptr || link_->kv_generation() == generation_) return;
    generation_ = link_->kv_generation();
    agent_.drop_published();
    to_start_.clear();
    to_cancel_.clear();
    for (auto& [id, p] : pending_) {
        p.followers_lost = true;
        agent_.cancel(id);
    }
    exchange_ranks();
}

std::vector<std::string> KvTransferGroup::take_released() {
    follow_regroup();
    return agent_.take_released();
}

void KvTransferGroup::fetch(KvTransferAgent::FetchJob job) {
    follow_regroup();  // as publish_started: a new fetch must not be marked lost with the old ones
    if (link_ == nullptr) {
        agent_.fetch(std::move(job));
        return;
    }
    job.release = false;  // when every rank is done
    to_start_.push_back({job.id, job.endpoint, job.remote_id, job.block_ids, job.skip_blocks, job.prompt_token_ids});
    const std::string id = job.id;
    pending_[id] = Pending{job, false, false, {}};
    agent_.fetch(std::move(job));
}

void KvTransferGroup::cancel(const std::string& id) {
    agent_.cancel(id);
    if (pending_.count(id) > 0) to_cancel_.push_back(id);
}

void KvTransferGroup::flush() {
    if (!to_start_.empty()) link_->announce(ipc::TpKvFetch{std::exchange(to_start_, {})});
    if (!to_cancel_.empty()) link_->announce(ipc::TpKvCancel{std::exchange(to_cancel_, {})});
}

std::vector<KvTransferAgent::Fetched> KvTransferGroup::take_fetched() {
    if (link_ == nullptr) return agent_.take_fetched();
    follow_regroup();
    for (auto& r : agent_.take_fetched()) {
        const auto it = pending_.find(r.id);
        if (it == pending_.end()) continue;
        it->second.own_done = true;
        if (!r.error.empty() && !it->second.followers_lost) to_cancel_.push_back(r.id);  // the others stop too
        it->second.own = std::move(r);
    }
    flush();
    return poll_followers();
}

KvTransferAgent::Fetched KvTransferGroup::finish(Pending& p, const std::string& follower_error) {
    // As a lone agent does: unless the producer refused this consumer (another may still fetch).
    if (p.own.meta.error.empty()) agent_.release(p.job.endpoint, p.job.remote_id);
    KvTransferAgent::Fetched out = std::move(p.own);
    if (out.error.empty()) out.error = follower_error;
    return out;
}

// The fetches whose own part has ended, once every follower has ended its part too.
std::vector<KvTransferAgent::Fetched> KvTransferGroup::poll_followers() {
    std::vector<KvTransferAgent::Fetched> out;
    std::vector<std::string> ids;
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.own_done && it->second.followers_lost) {
            out.push_back(finish(it->second, "the instance's TP group re-formed during its KV transfer"));
            it = pending_.erase(it);
            continue;
        }
        if (it->second.own_done) ids.push_back(it->first);
        ++it;
    }
    const double now = steady_seconds();
    if (ids.empty() || now - last_poll_ < kFollowerPollSeconds) return out;
    last_poll_ = now;
    link_->announce(ipc::TpKvPoll{ids});
    std::vector<int64_t> state(2 * ids.size(), 0);  // the leader's part has ended: 0 running, 0 failed
    link_->tp_comm().all_reduce_max(std::span<int64_t>(state));
    for (size_t i = 0; i < ids.size(); ++i) {
        if (state[i] != 0) continue;  // still running on a follower
        const int64_t failed_rank = state[ids.size() + i] - 1;
        const std::string error =
            failed_rank < 0
                ? ""
                : fmt::format("the KV transfer into TP rank {} of this decode instance failed (its log says why)",
                              failed_rank);
        const auto it = pending_.find(ids[i]);
        out.push_back(finish(it->second, error));
        pending_.erase(it);
    }
    return out;
}

KvTransferFollower::KvTransferFollower(const KvTransferConfig& config, int port_offset, int tp_rank, Logger* logger)
    : config_(config), port_offset_(port_offset), tp_rank_(tp_rank), logger_(logger) {}

void KvTransferFollower::kv_created(model::KvCache& cache) {
    kv_dropped();
    agent_ = std::make_unique<KvTransferAgent>(config_, cache, port_offset_, tp_rank_, logger_);
}

void KvTransferFollower::kv_dropped() {
    agent_.reset();
    finished_.clear();
}

bool KvTransferFollower::handle(const ipc::TpMessage& message, parallel::Communicator& comm) {
    if (const auto* x = std::get_if<ipc::TpKvExchange>(&message)) {
        MOESERVE_CHECK(agent_ != nullptr, "TP follower: a KV exchange before the KV cache was created");
        agent_->set_generation(x->generation);
        (void)gather_ranks(comm, agent_->endpoint(), agent_->slice());
    } else if (const auto* f = std::get_if<ipc::TpKvFetch>(&message)) {
        MOESERVE_CHECK(agent_ != nullptr, "TP follower: a KV fetch before the KV cache was created");
        for (const auto& job : f->jobs) agent_->fetch(job_of(job));
    } else if (const auto* c = std::get_if<ipc::TpKvCancel>(&message)) {
        for (const auto& id : c->ids) agent_->cancel(id);
    } else if (const auto* p = std::get_if<ipc::TpKvPoll>(&message)) {
        poll(*p, comm);
    } else {
        return false;
    }
    return true;
}

void KvTransferFollower::poll(const ipc::TpKvPoll& poll, parallel::Communicator& comm) {
    for (auto& r : agent_->take_fetched()) finished_[r.id] = std::move(r.error);
    const size_t n = poll.ids.size();
    std::vector<int64_t> state(2 * n, 0);
    for (size_t i = 0; i < n; ++i) {
        const auto it = finished_.find(poll.ids[i]);
        if (it == finished_.end()) {
            state[i] = 1;
        } else if (!it->second.empty()) {
            state[n + i] = tp_rank_ + 1;
        }
    }
    comm.all_reduce_max(std::span<int64_t>(state));
    for (size_t i = 0; i < n; ++i) {
        if (state[i] == 0) finished_.erase(poll.ids[i]);  // every rank is done with it
    }
}

}  // namespace moeserve::engine
