// Tensor parallelism inside one DP group's engine process set: the tp_rank-0 rank (the one with
// the EngineCore and the scheduler) broadcasts every forward's ForwardBatch over the TP group; its
// TP peers have no scheduler and run the same forward on their weight shard (follower loop).
// Each announcement is one ipc::TpMessage (ipc/tp_messages.h): its byte length, then its bytes.
//
//   leader (tp_rank 0)                                 follower (tp_rank > 0)
//   TpLeaderModel::create_kv_cache -- TpCreateKv -----> create_kv_cache(num_blocks, block_size)
//   TpLeaderModel::forward ---------- TpForward ------> model.forward(same batch)   (TP/EP collectives
//                                     (tables as deltas)                            inside, in lock-step)
//   TpLeaderModel::forward_draft ---- TpForward ------> model.forward_draft(same batch)
//                                     (draft_head set)
//   TpLeaderModel::keepalive -------- TpNoop ---------> (idle: keeps Gloo's timeout from firing)
//   KvTransferGroup (PD) ------------ TpKv* ----------> KvTransferFollower::handle (kv_transfer_group.h)
//   TpLeaderModel::shutdown --------- TpShutdown -----> run_tp_follower returns 0
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "moeserve/ipc/tp_messages.h"

#include "moeserve/core/log.h"
#include "moeserve/engine/kv_transfer/kv_transfer_group.h"
#include "moeserve/model/model.h"
#include "moeserve/parallel/comm.h"

namespace moeserve::engine {

// The block tables of the TP broadcast as deltas: both sides hold the tables of the previous
// forward's sequences by ForwardBatch::seq_ids, and a forward sends, per sequence, how many held
// blocks stay and the blocks after them (usually none in a decode step). A sequence not in the
// previous forward, a batch without seq_ids (dummy forwards) or with a repeated id sends whole
// tables. The leader's encode() and each follower's decode() see the same forwards in the same
// order. Engine thread only.
class TpTables {
public:
    // Leader: the message of `batch` (every field of it; see the binding in the .cpp).
    ipc::TpForward encode(const model::ForwardBatch& batch);
    // Follower: rebuilds the leader's batch. Error kInvalidArgument when the message does not fit
    // what is held (out of step with the leader) or is malformed.
    void decode(const ipc::TpForward& w, model::ForwardBatch& batch);

    size_t num_held() const { return held_.size(); }
    size_t blocks_held() const;

private:
    struct Held {
        std::vector<int32_t> table;  // without padding
        int64_t forward = 0;         // the last forward that had this sequence
    };
    // Stamps this forward's sequences; false (and nothing held) when they cannot key deltas.
    bool begin_forward(const std::vector<int64_t>& seq_ids);
    void forget_absent();

    std::unordered_map<int64_t, Held> held_;
    int64_t forward_ = 0;
};

// A Model decorator for the TP leader: every create_kv_cache/forward is first announced to the TP
// peers (one TpMessage), then run on the inner model. The inner
// model and the communicator must outlive it. Engine thread only. Collective errors (a dead peer)
// surface as Error kUnavailable from the call that broadcast.
class TpLeaderModel final : public model::Model, public TpKvLink {
public:
    TpLeaderModel(model::Model& inner, parallel::Communicator& tp,
                  std::chrono::milliseconds keepalive = std::chrono::milliseconds(1000));

    const model::ModelInfo& info() const override { return inner_.info(); }
    std::unique_ptr<model::KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const model::ForwardBatch& batch, model::KvCache& kv) override;
    bool has_draft_head() const override { return inner_.has_draft_head(); }
    TensorView forward_draft(const model::ForwardBatch& batch, model::KvCache& kv) override;
    const model::ExpertLoadStats* expert_load() const override { return inner_.expert_load(); }

    // Broadcasts a no-op when nothing was broadcast for `keepalive` (call from idle loops; the
    // followers wait in a broadcast bounded by the communicator's timeout).
    void keepalive();
    // Tells the followers to leave their loop. Call once, last; errors are swallowed (peers may
    // be gone already).
    void shutdown();
    // The TP group re-formed (self-healing): a follower is a new process or has started its loop
    // over, so the KV cache is announced again (same size) and the block tables are sent whole.
    void regrouped();

    // TpKvLink (PD disaggregation with TP).
    void announce(const ipc::TpMessage& message) override { send(message); }
    parallel::Communicator& tp_comm() override { return tp_; }
    int64_t kv_generation() const override { return kv_generation_; }

private:
    void send(const ipc::TpMessage& message) const;

    model::Model& inner_;
    parallel::Communicator& tp_;
    std::chrono::milliseconds keepalive_;
    mutable std::chrono::steady_clock::time_point last_sent_;
    TpTables tables_;
    mutable std::optional<ipc::TpCreateKv> kv_shape_;  // the last KV cache announced
    mutable int64_t kv_generation_ = 0;                // KV caches announced
};

// The TP follower's loop: waits for the leader's messages, creates the KV cache and runs every
// forward the leader announces (results thrown away: the leader samples); kv_transfer (PD
// disaggregation, or null) gets the KV transfer's messages. Returns 0 when the leader shuts
// down; throws Error kUnavailable when the leader or a peer is gone (after the communicator's
// timeout), Error kInvalidArgument on a message it cannot decode.
int run_tp_follower(model::Model& model, parallel::Communicator& tp, Logger& logger,
                    KvTransferFollower* kv_transfer = nullptr);

}  // namespace moeserve::engine
