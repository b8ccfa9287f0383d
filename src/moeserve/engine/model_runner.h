// ModelRunner: ScheduledBatch -> ForwardBatch -> Model::forward -> logits -> Sampler ->
// StepResult. Owns the KV storage (the model's KvCache); the KvCacheManager owns the block ids.
// Engine thread only.
#pragma once

#include <chrono>
#include <memory>

#include "moeserve/engine/sampler.h"
#include "moeserve/engine/scheduler/scheduled_batch.h"
#include "moeserve/model/forward_batch.h"
#include "moeserve/model/model.h"

namespace moeserve::engine {

class ModelRunner {
public:
    // model and sampler must outlive the runner. Creates num_blocks blocks of KV storage.
    ModelRunner(model::Model& model, Sampler& sampler, int64_t num_blocks, int64_t block_size);

    // Runs the step: one forward over every scheduled request's new tokens (none for a dummy
    // batch), then samples the requests that reach their last token; with a draft head (MTP),
    // then runs it (draft_batch) for the next step's drafts. Reads the requests'
    // num_computed_tokens as they were at schedule() time (call before Scheduler::update).
    StepResult execute(const ScheduledBatch& batch);

    // Runs the model on a dummy batch whose results are thrown away: one token (id 0) at position 0,
    // its K/V written to slot 0 of the null block 0 (never read by a request), no logits rows. It
    // takes part in every collective of a forward with the same kinds as a real batch (DP lock-step:
    // a rank with nothing of the agreed phase still joins the MoE exchanges). With a draft head,
    // its pass too, on the same token.
    void execute_dummy();

    // The MoE exchange the following forwards ask for (expert parallelism; DP ranks must agree).
    void set_moe_exchange(parallel::MoeExchangeKind kind) { moe_exchange_ = kind; }
    parallel::MoeExchangeKind moe_exchange() const { return moe_exchange_; }

    // The ForwardBatch execute() would run, and for each of its logits rows the scheduled
    // request index and position. Exposed for tests.
    struct Layout {
        model::ForwardBatch forward;
        std::vector<int32_t> row_request;   // [logits rows] index into batch.requests
        std::vector<int32_t> row_position;  // [logits rows] token position of the row
    };
    Layout build(const ScheduledBatch& batch) const;

    // The draft head's batch after a step (Model::forward_draft): each request's positions that
    // this step computed and kept (through its last token and the drafts the sampler accepted),
    // each with the token that follows it (the next prompt token, an accepted draft, or the
    // token just sampled) and the step's hidden row of that position. A sampling request's last
    // row is a logits row (its draft for the next step) when batch.wants_head_drafts. Exposed for
    // tests.
    static model::ForwardBatch draft_batch(const ScheduledBatch& batch, const model::ForwardBatch& step,
                                           const StepResult& result);

    // Cumulative seconds of execute()'s parts (the per-step breakdown, ipc::Stats).
    struct Times {
        double prepare = 0;  // build(): the ForwardBatch and its block tables
        double forward = 0;  // Model::forward (and forward_draft with a draft head)
        double sample = 0;   // logits -> tokens
    };
    const Times& times() const { return times_; }
    // The KV storage (PD disaggregation ships its blocks).
    model::KvCache& kv_cache() { return *kv_; }

private:
    // Runs the draft head after a step (Model::has_draft_head): each sampling request's draft.
    std::vector<std::vector<TokenId>> propose_with_draft_head(const ScheduledBatch& batch,
                                                              const model::ForwardBatch& step,
                                                              const StepResult& result);

    Times times_;
    model::Model& model_;
    Sampler& sampler_;
    int64_t block_size_;
    std::unique_ptr<model::KvCache> kv_;
    parallel::MoeExchangeKind moe_exchange_ = parallel::MoeExchangeKind::kAllToAll;
};

}  // namespace moeserve::engine
