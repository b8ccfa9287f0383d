// Tensor parallelism inside one DP group's engine process set: the tp_rank-0 rank (the one with
// the EngineCore and the scheduler) broadcasts every forward's ForwardBatch over the TP group; its
// TP peers have no scheduler and run the same forward on their weight shard (follower loop).
//
//   leader (tp_rank 0)                               follower (tp_rank > 0)
//   TpLeaderModel::create_kv_cache -- header ------> create_kv_cache(num_blocks, block_size)
//   TpLeaderModel::forward ---------- header+data -> model.forward(same batch)   (TP/EP collectives
//   TpLeaderModel::keepalive -------- noop header -> (idle: keeps Gloo's timeout from firing)
//   TpLeaderModel::shutdown --------- shutdown ----> run_tp_follower returns 0
#pragma once

#include <array>
#include <chrono>
#include <memory>

#include "moeserve/core/log.h"
#include "moeserve/model/model.h"
#include "moeserve/parallel/comm.h"

namespace moeserve::engine {

// A Model decorator for the TP leader: every create_kv_cache/forward is first announced to the TP
// peers (one header broadcast, then one payload broadcast), then run on the inner model. The inner
// model and the communicator must outlive it. Engine thread only. Collective errors (a dead peer)
// surface as Error kUnavailable from the call that broadcast.
class TpLeaderModel final : public model::Model {
public:
    TpLeaderModel(model::Model& inner, parallel::Communicator& tp,
                  std::chrono::milliseconds keepalive = std::chrono::milliseconds(1000));

    const model::ModelInfo& info() const override { return inner_.info(); }
    std::unique_ptr<model::KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const model::ForwardBatch& batch, model::KvCache& kv) override;

    // Broadcasts a no-op when nothing was broadcast for `keepalive` (call from idle loops; the
    // followers wait in a broadcast bounded by the communicator's timeout).
    void keepalive();
    // Tells the followers to leave their loop. Call once, last; errors are swallowed (peers may
    // be gone already).
    void shutdown();

private:
    void send_header(const std::array<int64_t, 8>& header) const;

    model::Model& inner_;
    parallel::Communicator& tp_;
    std::chrono::milliseconds keepalive_;
    mutable std::chrono::steady_clock::time_point last_sent_;
};

// The TP follower's loop: waits for the leader's headers, creates the KV cache and runs every
// forward the leader announces (results thrown away: the leader samples). Returns 0 when the
// leader shuts down; throws Error kUnavailable when the leader or a peer is gone (after the
// communicator's timeout).
int run_tp_follower(model::Model& model, parallel::Communicator& tp, Logger& logger);

}  // namespace moeserve::engine
