// ScheduledBatch (what the scheduler chose for one step) and StepResult (what the model runner
// and sampler made of it): the two values that flow schedule -> execute -> update.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moeserve/engine/request.h"
#include "moeserve/engine/scheduler/policy.h"
#include "moeserve/ipc/messages.h"

namespace moeserve::engine {

struct ScheduledRequest {
    Request* request = nullptr;  // owned by the Scheduler; valid until update() returns
    int32_t num_tokens = 0;      // tokens computed this step, from request->num_computed_tokens
    std::vector<int32_t> new_block_ids;
    bool is_decode = false;
    // Speculative decoding: tokens drafted after the request's last one (a decode only). They are
    // the last draft_token_ids.size() of num_tokens; the step verifies them (Sampler::sample_drafts).
    std::vector<TokenId> draft_token_ids;
    int32_t num_drafts() const { return static_cast<int32_t>(draft_token_ids.size()); }
    // The step computes through the request's last token, so the sampler draws its next token.
    bool samples() const { return request->num_computed_tokens + num_tokens - num_drafts() == request->num_tokens(); }
};

struct ScheduledBatch {
    std::vector<ScheduledRequest> requests;  // running ones first (by age), then new admissions
    std::vector<std::string> preempted;      // request ids sent back to waiting this step
    Phase phase = Phase::kIdle;              // what ran: kIdle when nothing did
    bool dummy = true;                       // nothing scheduled (the forward is skipped)
    int32_t num_tokens = 0;
    int32_t num_prefill_tokens = 0;
    // With a draft head (MTP): whether it computes drafts after this step. When the draft budget
    // will not draft next step it runs without its lm_head (its K/V must stay complete).
    bool wants_head_drafts = true;
};

struct SampledToken {
    TokenId token_id = 0;
    std::optional<ipc::TokenLogprobs> logprobs;  // when the request asked for logprobs
};

// One entry per ScheduledBatch::requests, in order.
struct StepResult {
    std::vector<std::optional<SampledToken>> sampled;  // set where samples()
    // Speculative decoding: the drafts the sampler drew as well, in order, before `sampled` (which
    // is then the token after them: a correction or the bonus token). Empty without drafts.
    std::vector<std::vector<SampledToken>> accepted_drafts;
    std::vector<std::vector<ipc::TokenLogprobs>> prompt_logprobs;  // this step's prompt positions
    // The draft head's proposals for each sampling request's next step (Model::forward_draft);
    // empty without a draft head.
    std::vector<std::vector<TokenId>> head_drafts;
};

}  // namespace moeserve::engine
