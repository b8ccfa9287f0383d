// Scheduler: continuous batching over running and waiting requests (vLLM v1 core/sched). Each
// step it picks tokens per request within a TokenBudget, admits waiting requests FCFS while the
// KV cache has blocks for them (admission), preempts the youngest running request by recompute
// when blocks run out, and after the forward applies the sampled tokens and finish rules.
// Not thread-safe: called only from the engine thread.
//
//   step:  schedule() -> ScheduledBatch -> ModelRunner::execute -> StepResult -> update()
//   running [r0 r1 r2]   decodes/chunks in age order; r2 is preempted first (youngest)
//   waiting [r5 r3 r4]   preempted ones go to the front; admitted from the front only (FCFS)
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "moeserve/engine/kv_cache/kv_cache_manager.h"
#include "moeserve/engine/request.h"
#include "moeserve/engine/scheduler/kv_connector.h"
#include "moeserve/engine/scheduler/policy.h"
#include "moeserve/engine/scheduler/scheduled_batch.h"
#include "moeserve/engine/scheduler/token_budget.h"
#include "moeserve/engine/spec_decode/draft_budget.h"
#include "moeserve/engine/spec_decode/speculative_config.h"
#include "moeserve/ipc/kv_messages.h"

namespace moeserve::engine {

// Which waiting request goes first, and which running one is preempted when blocks run out
// (vLLM's --scheduling-policy): kFcfs = arrival order, the youngest preempted; kPriority = the
// lowest (priority, arrival) first, the highest preempted.
enum class SchedulingOrder { kFcfs, kPriority };

struct SchedulerConfig {
    int32_t max_num_seqs = 256;             // running requests at once
    int32_t max_num_batched_tokens = 2048;  // tokens per step
    int32_t max_model_len = 4096;           // prompt + output tokens of one request
    bool enable_chunked_prefill = true;
    SchedulingOrder order = SchedulingOrder::kFcfs;
    SpeculativeConfig speculative;  // --speculative-config: decodes carry drafts (ngram_proposer.h)
};

struct SchedulerCounters {
    int64_t num_preemptions = 0;
    int64_t num_prompt_tokens = 0;      // tokens computed for prompts / recomputes
    int64_t num_generation_tokens = 0;  // tokens sampled
    // Speculative decoding (vLLM's vllm:spec_decode_*): decodes that carried drafts, their drafted
    // tokens, the drafts accepted, and the drafts accepted at each draft position.
    int64_t num_drafts = 0;
    int64_t num_draft_tokens = 0;
    int64_t num_accepted_tokens = 0;
    std::vector<int64_t> num_accepted_tokens_per_pos;
};

class Scheduler {
public:
    // kv must outlive the scheduler. Raises Error kInvalidArgument for inconsistent limits.
    Scheduler(const SchedulerConfig& config, KvCacheManager& kv, std::unique_ptr<SchedulingPolicy> policy);

    // Queues a request, whose values ipc::validate_request checked. One that can never run here
    // (more blocks than the cache has, a duplicate id, Request::error set) is finished with kError
    // and a reason, reported by the next update()/take_finished().
    void add_request(std::unique_ptr<Request> request);
    // Removes the requests (unknown ids are ignored) and frees their blocks at once (one whose
    // remote KV load runs: when the load stops); each is reported finished with kAbort. Not to be
    // called between schedule() and update().
    void abort_requests(std::span<const std::string> request_ids);
    // The step in progress failed part-way (a rank of the group died): every running request
    // finishes with kError and `reason`, its blocks freed (their KV may be half-written, or held
    // by a rank that is gone); waiting ones stay queued. Reported by the next take_finished().
    void fail_running(const std::string& reason);

    // Picks the next step's work. forced: a phase imposed from outside (see SchedulingPolicy);
    // when none is and the policy separates phases, the policy decides it from demand().
    ScheduledBatch schedule(std::optional<Phase> forced = std::nullopt);
    // Applies a step's results: advances computed tokens, appends sampled tokens, finishes
    // requests (stop token, max_tokens, max_model_len) and frees their blocks. Returns the
    // outputs of requests that produced a token or finished (incl. rejected/aborted ones).
    std::vector<ipc::RequestOutput> update(const ScheduledBatch& batch, const StepResult& result);
    // The step ran its forward (and sampling) in `seconds`: speculative decoding's cost rule
    // (DraftBudget) learns from decode-only steps.
    void record_step_time(const ScheduledBatch& batch, double seconds);
    // Speculative decoding's budget of drafted tokens per sequence and step.
    const DraftBudget& draft_budget() const { return draft_budget_; }
    // Outputs produced outside a step (rejections, aborts, remote prefills loaded, the KV
    // connector's announcements), cleared.
    std::vector<ipc::RequestOutput> take_finished();

    // PD disaggregation (docs/parallelism.md): the KV connector (kv_connector.h), null = none.
    // It must outlive the scheduler; set before the first request.
    void set_kv_connector(KvConnector* connector) { connector_ = connector; }
    // Runs the connector's before-schedule hooks: frees the blocks of held requests it released,
    // lets requests whose remote load ended run on (or fail), and starts the loads of requests
    // waiting for remote KV, FCFS, as blocks for their whole prompt come free (those blocks stay
    // out of batches and of the prefix cache until the load ends). Every step calls it first; an
    // idle engine loop calls it too.
    void poll_kv_connector();
    // Requests waiting for remote KV (queued or loading), and finished ones whose blocks are
    // held for the connector.
    int32_t num_remote_waiting() const { return static_cast<int32_t>(remote_waiting_.size()); }
    int32_t num_held() const { return static_cast<int32_t>(held_.size()); }
    // Outputs queued outside a step (take_finished() hands them out).
    bool has_pending_outputs() const { return !finished_.empty(); }

    // What this scheduler could run now (the phase decision's input): a prefill if a running
    // request has prompt tokens left or the first waiting request is admissible now (seats and KV
    // blocks); decodes if a running request decodes.
    PhaseDemand demand();
    // The policy's phase decision (SchedulingPolicy::decide_phase), for an engine whose phase is
    // decided outside schedule(): the DP coordinator, from the group's demand.
    PhaseDecision decide_phase(PhaseDemand demand) { return policy_->decide_phase(demand); }
    void restart_phase_decisions() { policy_->restart_phase_decisions(); }

    int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
    // Running requests whose next step is a decode (they wait during a prefill-only step).
    int32_t num_running_decodes() const;
    int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
    bool has_unfinished_requests() const { return !running_.empty() || !waiting_.empty() || !finished_.empty(); }
    const SchedulerCounters& counters() const { return counters_; }
    const SchedulingPolicy& policy() const { return *policy_; }
    // The request with this id, if it is queued or running (tests and debugging).
    const Request* find(const std::string& request_id) const;

private:
    std::optional<std::string> validate(const Request& request) const;
    bool admissible(Request& request, int32_t num_tokens, const CachedPrefix& prefix) const;
    void schedule_running(const StepPlan& plan, TokenBudget& budget, ScheduledBatch& out);
    void schedule_waiting(TokenBudget& budget, ScheduledBatch& out);
    // Schedules the decode r with its drafts when it has some and the budget and free blocks hold
    // them without preempting anyone; false leaves r to the plain one-token decode.
    bool schedule_with_drafts(Request* r, TokenBudget& budget, ScheduledBatch& out);
    // Appends a step's tokens to the running request s.request (accepted drafts, then the sampled
    // token) into `out`, each first through its grammar (a structured output), stopping at the
    // first that finishes it; returns false when it finished, with grammar_error set when its
    // grammar refused a token. Rolls back the KV slots of rejected drafts.
    bool append_tokens(const ScheduledRequest& s, std::span<const SampledToken> tokens, ipc::RequestOutput& out,
                       std::string& grammar_error);
    // Adds a verify step of s (its drafts, num_accepted of them kept) to the spec_decode counters.
    void count_drafts(const ScheduledRequest& s, size_t num_accepted);
    void preempt(Request* request, ScheduledBatch& out);
    // Finishes a request and lets it go (preempt() frees a preempted one's blocks too).
    ipc::RequestOutput finish(Request* request, FinishReason reason);
    // Removes a finished request: its blocks are freed, or held while the KV connector asks.
    void let_go(Request* request, FinishReason reason);
    bool check_stop(Request& request) const;

    SchedulerConfig config_;
    KvCacheManager& kv_;
    std::unique_ptr<SchedulingPolicy> policy_;
    std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
    std::vector<Request*> running_;
    std::deque<Request*> waiting_;  // in scheduling order (config_.order)
    // Puts r where config_.order says: FCFS at the back (front: a preempted request); priority
    // by (priority, arrival order).
    void enqueue_waiting(Request* r, bool preempted);
    // The running request to preempt when blocks run out, among running_[first, end) (those not
    // scheduled yet this step; running_[first] is the one asking).
    Request* preemption_victim(size_t first) const;
    std::vector<ipc::RequestOutput> finished_;
    SchedulerCounters counters_;
    DraftBudget draft_budget_;
    int32_t step_drafts_ = 0;  // this step's draft budget per sequence (draft_budget_.next())
    KvConnector* connector_ = nullptr;
    std::deque<Request*> remote_waiting_;  // waiting for remote KV: queued or loading (Request::fetching)
    int32_t num_fetching_ = 0;
    std::unordered_map<std::string, std::unique_ptr<Request>> held_;  // finished, blocks held for the connector
    // Allocates blocks for the remote-waiting requests that fit and starts their loads.
    void start_remote_loads();
    // A load ended: on success the request continues as if it had prefilled here (its first
    // token appended as if sampled, its output queued); on error it fails.
    void complete_remote_load(const KvLoadResult& load);
};

}  // namespace moeserve::engine
