// PD disaggregation across the TP ranks of one instance (docs/parallelism.md, "PD
// disaggregation"). Each TP rank's cache holds its own KV parts (model/kv_cache.h), so each rank
// runs a KvTransferAgent: a producer's ranks each serve their parts, a consumer's ranks each
// fetch theirs. The leader (TP rank 0, which has the scheduler) coordinates over the TP group's
// broadcast (ipc/tp_messages.h):
//
//   leader KvTransferGroup                              follower KvTransferFollower
//   after the KV cache exists (and each re-formed group)
//     TpKvExchange + all_gather of endpoints/parts -->  the same all_gather (producer: rank 0's
//                                                       metadata lists every rank)
//   fetch(job): its own agent fetches its parts, and
//     TpKvFetch {job} --------------------------->      its agent fetches its parts (no release)
//   cancel(id): TpKvCancel {id} ------------------>     stops that fetch
//   once its own part ended: TpKvPoll {ids}
//     + all_reduce_max (still running / failed) <-->    the same all_reduce_max
//   every rank done: the request continues (or fails, naming the rank); the leader releases
//   the producer's blocks.
//
// A fetch's blocks are freed only when every rank has let go of them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/engine/kv_transfer/kv_transfer_agent.h"
#include "moeserve/ipc/tp_messages.h"
#include "moeserve/parallel/comm.h"

namespace moeserve::engine {

// How a TP leader reaches its followers (TpLeaderModel implements it).
class TpKvLink {
public:
    virtual ~TpKvLink() = default;
    // Broadcasts message to the followers, which pass it to KvTransferFollower::handle.
    virtual void announce(const ipc::TpMessage& message) = 0;
    virtual parallel::Communicator& tp_comm() = 0;
    // Changes whenever the followers create their KV cache anew (the group re-formed).
    virtual int64_t kv_generation() const = 0;
};

// The KV port offset of TP rank tp_rank of DP rank dp_rank: each rank binds kv_port + this.
inline int kv_port_offset(int dp_rank, int tp_size, int tp_rank) { return dp_rank * tp_size + tp_rank; }

// The leader's KV transfer, which PdKvConnector (the scheduler's KV connector) drives. Without a
// link (TP = 1) it is its agent.
// Engine thread only.
class KvTransferGroup {
public:
    // cache must outlive it; link (null for TP = 1) too.
    KvTransferGroup(const KvTransferConfig& config, model::KvCache& cache, int engine_index, TpKvLink* link,
                    Logger* logger);

    const KvTransferConfig& config() const { return agent_.config(); }
    const std::string& endpoint() const { return agent_.endpoint(); }
    void publish(KvTransferAgent::Published transfer) { agent_.publish(std::move(transfer)); }
    // A transfer started after the group re-formed belongs to the new generation: the regroup is
    // followed first, or its lagging discovery would drop the new transfer with the old ones.
    void publish_started(const std::string& id, const std::vector<ipc::TokenId>& prompt_token_ids) {
        follow_regroup();
        agent_.publish_started(id, prompt_token_ids);
    }
    void progress(const std::string& id, const std::vector<int32_t>& block_ids, int32_t computed_blocks) {
        agent_.progress(id, block_ids, computed_blocks);
    }
    void fail_published(const std::string& id, const std::string& reason) { agent_.fail_published(id, reason); }
    std::vector<std::string> take_released();
    void fetch(KvTransferAgent::FetchJob job);
    // Fetches every rank has finished (a failure on any rank fails the request).
    std::vector<KvTransferAgent::Fetched> take_fetched();
    void cancel(const std::string& id);
    // Tells a producer that a transfer nobody will fetch may be freed.
    void release(const std::string& endpoint, const std::string& remote_id) { agent_.release(endpoint, remote_id); }
    // This rank's (the leader's) counters.
    KvTransferCounters counters() const { return agent_.counters(); }

private:
    struct Pending {
        KvTransferAgent::FetchJob job;
        bool own_done = false;
        bool followers_lost = false;  // the group re-formed: the followers no longer run it
        KvTransferAgent::Fetched own;
    };
    void exchange_ranks();
    void follow_regroup();
    void flush();
    std::vector<KvTransferAgent::Fetched> poll_followers();
    KvTransferAgent::Fetched finish(Pending& p, const std::string& follower_error);

    KvTransferAgent agent_;
    TpKvLink* link_;
    int64_t generation_ = 0;
    std::map<std::string, Pending> pending_;
    std::vector<ipc::TpKvFetchJob> to_start_;
    std::vector<std::string> to_cancel_;
    double last_poll_ = 0;
};

// A TP follower's KV transfer: its agent, created with each KV cache, and the leader's
// messages. Follower thread only.
class KvTransferFollower {
public:
    KvTransferFollower(const KvTransferConfig& config, int port_offset, int tp_rank, Logger* logger);
    // The follower created its KV cache (again): a new agent over it. kv_dropped() before the
    // cache goes.
    void kv_created(model::KvCache& cache);
    void kv_dropped();
    // After every forward (KvTransferAgent::forward_done).
    void forward_done() {
        if (agent_) agent_->forward_done();
    }
    // True when message was one of the KV transfer's (handled, collectives included).
    bool handle(const ipc::TpMessage& message, parallel::Communicator& comm);

private:
    void poll(const ipc::TpKvPoll& poll, parallel::Communicator& comm);

    KvTransferConfig config_;
    int port_offset_, tp_rank_;
    Logger* logger_;
    std::unique_ptr<KvTransferAgent> agent_;
    std::unordered_map<std::string, std::string> finished_;  // id -> error ("" = done)
};

}  // namespace moeserve::engine
