#include "moeserve/engine/scheduler/scheduler.h"

#include <algorithm>

#include "moeserve/core/clock.h"
#include "moeserve/core/error.h"
#include "moeserve/engine/spec_decode/ngram_proposer.h"

namespace moeserve::engine {

namespace {

ipc::RequestOutput output_of(const Request& r) {
    ipc::RequestOutput out;
    out.request_id = r.request_id;
    out.num_prompt_tokens = r.num_prompt_tokens();
    out.num_cached_tokens = std::max(0, r.num_cached_tokens);
    out.queue_seconds = r.queue_seconds;
    return out;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv, std::unique_ptr<SchedulingPolicy> policy)
    : config_(config),
      kv_(kv),
      policy_(std::move(policy)),
      draft_budget_(config.speculative.num_speculative_tokens, config.speculative.adaptive) {
    MOESERVE_CHECK(policy_ != nullptr, "scheduler without a policy");
    // One counter per draft position from the start (vLLM's series per position), 0 until used.
    if (config.speculative.enabled())
        counters_.num_accepted_tokens_per_pos.resize(static_cast<size_t>(config.speculative.num_speculative_tokens));
    if (config.max_num_seqs < 1 || config.max_num_batched_tokens < 1 || config.max_model_len < 1) {
        raise(ErrorCode::kInvalidArgument,
              "--max-num-seqs, --max-num-batched-tokens and --max-model-len must be >= 1; got {}, {}, {}",
              config.max_num_seqs, config.max_num_batched_tokens, config.max_model_len);
    }
    if (!config.enable_chunked_prefill && config.max_num_batched_tokens < config.max_model_len) {
        raise(ErrorCode::kInvalidArgument,
              "without chunked prefill --max-num-batched-tokens ({}) must be >= --max-model-len ({}), or a long "
              "prompt could never run",
              config.max_num_batched_tokens, config.max_model_len);
    }
}

// NOTE(#18): only what the engine alone knows. The request's values were checked once where it
// was made (ipc::validate_request); the engine trusts its authenticated channel and does not
// check them again.
std::optional<std::string> Scheduler::validate(const Request& r) const {
    if (!r.error.empty()) return r.error;
    if (requests_.count(r.request_id) || held_.count(r.request_id))
        return fmt::format("request id '{}' is already in use", r.request_id);
    const auto& s = r.sampling;
    const int64_t usable = kv_.pool().num_blocks() - 1;
    const int64_t needed = (r.num_prompt_tokens() + s.max_tokens + kv_.block_size() - 1) / kv_.block_size();
    if (needed > usable) {
        return fmt::format(
            "prompt tokens + max_tokens ({} + {}) need {} KV cache blocks of {} tokens, but the cache "
            "has {}; lower max_tokens or give the KV cache more memory (--kv-cache-memory)",
            r.num_prompt_tokens(), s.max_tokens, needed, kv_.block_size(), usable);
    }
    return std::nullopt;
}

void Scheduler::add_request(std::unique_ptr<Request> request) {
    MOESERVE_CHECK(request != nullptr, "null request");
    request->added_at = steady_seconds();
    if (auto reason = validate(*request)) {
        ipc::RequestOutput out = output_of(*request);
        out.finish_reason = FinishReason::kError;
        out.error = std::move(*reason);
        finished_.push_back(std::move(out));
        return;
    }
    Request* r = request.get();
    r->status = RequestStatus::kWaiting;
    requests_.emplace(r->request_id, std::move(request));
    if (connector_) {
        if (auto announcement = connector_->request_added(*r)) finished_.push_back(std::move(*announcement));
    }
    if (connector_ && connector_->loads_remotely(*r)) {
        remote_waiting_.push_back(r);
    } else {
        enqueue_waiting(r, false);
    }
}

void Scheduler::enqueue_waiting(Request* r, bool preempted) {
    if (config_.order == SchedulingOrder::kFcfs) {
        if (preempted)
            waiting_.push_front(r);
        else
            waiting_.push_back(r);
        return;
    }
    const auto before = [](const Request* a, const Request* b) {
        return a->priority != b->priority ? a->priority < b->priority : a->arrival_order < b->arrival_order;
    };
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), r, before), r);
}

Request* Scheduler::preemption_victim(size_t first) const {
    if (config_.order == SchedulingOrder::kFcfs) return running_.back();
    const auto from = running_.begin() + static_cast<std::ptrdiff_t>(first);
    return *std::max_element(from, running_.end(), [](const Request* a, const Request* b) {
        return a->priority != b->priority ? a->priority < b->priority : a->arrival_order < b->arrival_order;
    });
}

void Scheduler::abort_requests(std::span<const std::string> request_ids) {
    for (const auto& id : request_ids) {
        const auto it = requests_.find(id);
        if (it == requests_.end() || it->second->abort_pending) continue;
        Request* r = it->second.get();
        if (connector_) connector_->request_aborted(*r);
        if (r->fetching) {  // its blocks are being written: report it now, free them when the load stops
            r->abort_pending = true;
            ipc::RequestOutput out = output_of(*r);
            out.finish_reason = FinishReason::kAbort;
            finished_.push_back(std::move(out));
            continue;
        }
        finished_.push_back(finish(r, FinishReason::kAbort));
    }
}

void Scheduler::fail_running(const std::string& reason) {
    const std::vector<Request*> running = running_;  // finish() edits running_
    for (Request* r : running) {
        ipc::RequestOutput out = finish(r, FinishReason::kError);
        out.error = reason;
        finished_.push_back(std::move(out));
    }
}

const Request* Scheduler::find(const std::string& request_id) const {
    const auto it = requests_.find(request_id);
    return it == requests_.end() ? nullptr : it->second.get();
}

ipc::RequestOutput Scheduler::finish(Request* r, FinishReason reason) {
    r->finish_reason = reason;
    r->status = RequestStatus::kFinished;
    if (auto it = std::find(running_.begin(), running_.end(), r); it != running_.end()) running_.erase(it);
    if (auto it = std::find(waiting_.begin(), waiting_.end(), r); it != waiting_.end()) waiting_.erase(it);
    if (auto it = std::find(remote_waiting_.begin(), remote_waiting_.end(), r); it != remote_waiting_.end())
        remote_waiting_.erase(it);
    ipc::RequestOutput out = output_of(*r);
    out.finish_reason = reason;
    out.stop_token_id = r->stop_token_id;
    let_go(r, reason);
    return out;
}

void Scheduler::let_go(Request* r, FinishReason reason) {
    const auto it = requests_.find(r->request_id);
    if (connector_ && connector_->request_finished(*r, reason)) {
        held_.emplace(r->request_id, std::move(it->second));  // e.g. a prefill for another instance
    } else {
        kv_.free(*r);
    }
    requests_.erase(it);  // r is gone from here on (unless held)
}

void Scheduler::poll_kv_connector() {
    if (!connector_) return;
    connector_->before_schedule();
    for (const std::string& id : connector_->take_released()) {
        const auto it = held_.find(id);
        if (it == held_.end()) continue;
        kv_.free(*it->second);
        held_.erase(it);
    }
    for (const KvLoadResult& load : connector_->take_finished_loads()) complete_remote_load(load);
    start_remote_loads();
}

void Scheduler::start_remote_loads() {
    for (Request* r : remote_waiting_) {
        if (r->fetching) continue;
        if (num_running() + num_fetching_ >= config_.max_num_seqs) break;
        const CachedPrefix prefix = kv_.find_cached_prefix(*r);
        const int32_t n = r->num_prompt_tokens() - prefix.num_tokens;
        if (!kv_.can_allocate(*r, n, prefix)) break;  // FCFS among them, as the local queue
        auto blocks = kv_.allocate_slots(*r, n, prefix, /*enter_in_cache=*/false);
        MOESERVE_CHECK(blocks.has_value(), "{}: allocatable but allocation failed", r->request_id);
        r->num_cached_tokens = prefix.num_tokens;
        r->queue_seconds = std::max(0.0, steady_seconds() - r->added_at);
        r->fetching = true;
        ++num_fetching_;
        connector_->start_load(*r, static_cast<int32_t>(prefix.block_ids.size()));
    }
}

void Scheduler::complete_remote_load(const KvLoadResult& load) {
    const auto it = requests_.find(load.request_id);
    if (it == requests_.end() || !it->second->fetching) return;
    Request* r = it->second.get();
    r->fetching = false;
    --num_fetching_;
    if (r->abort_pending) {  // its abort output went out already
        if (auto w = std::find(remote_waiting_.begin(), remote_waiting_.end(), r); w != remote_waiting_.end())
            remote_waiting_.erase(w);
        let_go(r, FinishReason::kAbort);
        return;
    }
    const auto fail = [&](std::string why) {
        ipc::RequestOutput out = finish(r, FinishReason::kError);
        out.error = std::move(why);
        finished_.push_back(std::move(out));
    };
    const ipc::KvTransferMeta& meta = load.meta;
    if (!load.error.empty()) return fail(load.error);
    if (r->constrained() && !r->grammar->accept_token(meta.first_token)) {
        return fail("structured output: the prefill instance's first token does not match the grammar");
    }
    if (auto w = std::find(remote_waiting_.begin(), remote_waiting_.end(), r); w != remote_waiting_.end())
        remote_waiting_.erase(w);
    r->num_computed_tokens = r->num_prompt_tokens();
    kv_.cache_blocks(*r, r->num_computed_tokens);
    // The producer drew one random number for the first token; so does this stream, so that
    // a seeded request continues exactly as it would on one instance.
    if (r->sampling.temperature > 0) (void)r->rng.uniform_double();
    r->status = RequestStatus::kRunning;
    running_.push_back(r);
    r->append_output(meta.first_token);
    ++counters_.num_generation_tokens;
    ipc::RequestOutput out = output_of(*r);
    out.new_token_ids.push_back(meta.first_token);
    if (r->sampling.logprobs && meta.first_logprobs) out.new_logprobs.push_back(*meta.first_logprobs);
    if (r->sampling.prompt_logprobs) {
        out.prompt_logprobs = meta.prompt_logprobs.value_or(std::vector<ipc::TokenLogprobs>{});
        r->prompt_logprobs_sent = true;
    }
    if (check_stop(*r)) {
        const ipc::RequestOutput fin = finish(r, r->finish_reason);
        out.finish_reason = fin.finish_reason;
        out.stop_token_id = fin.stop_token_id;
    }
    finished_.push_back(std::move(out));
}

void Scheduler::preempt(Request* r, ScheduledBatch& out) {
    if (connector_) connector_->request_preempted(*r);  // before its blocks can be written again
    kv_.free(*r);
    r->num_computed_tokens = 0;
    r->status = RequestStatus::kPreempted;
    ++r->num_preemptions;
    if (!r->prompt_logprobs_sent) r->prompt_logprobs.clear();  // recomputed from the start
    enqueue_waiting(r, true);
    out.preempted.push_back(r->request_id);
    ++counters_.num_preemptions;
}

bool Scheduler::admissible(Request& r, int32_t num_tokens, const CachedPrefix& prefix) const {
    return num_running() < config_.max_num_seqs && num_tokens > 0 && kv_.can_allocate(r, num_tokens, prefix);
}

void Scheduler::schedule_running(const StepPlan& plan, TokenBudget& budget, ScheduledBatch& out) {
    size_t i = 0;
    while (i < running_.size() && budget.has_room()) {
        Request* r = running_[i];
        const bool decode = r->is_decode();
        const int32_t n = (decode ? plan.run_decodes : plan.run_prefills)
                              ? budget.grant(r->num_tokens_to_compute(), config_.enable_chunked_prefill)
                              : 0;
        if (n == 0) {
            ++i;
            continue;
        }
        if (decode && schedule_with_drafts(r, budget, out)) {
            ++i;
            continue;
        }
        std::optional<NewBlocks> blocks;
        while (!(blocks = kv_.allocate_slots(*r, n))) {
            // Out of blocks: recompute-preempt the youngest (or lowest-priority) running request,
            // maybe r itself.
            Request* victim = preemption_victim(i);
            running_.erase(std::find(running_.begin(), running_.end(), victim));
            preempt(victim, out);
            if (victim == r) break;
        }
        if (!blocks) break;
        out.requests.push_back(ScheduledRequest{r, n, std::move(blocks->block_ids), decode, {}});
        budget.consume(n);
        ++i;
    }
}

bool Scheduler::schedule_with_drafts(Request* r, TokenBudget& budget, ScheduledBatch& out) {
    if (!config_.speculative.enabled()) return false;
    // A step that accepts every draft emits drafts + 1 tokens: never past max_tokens or
    // max_model_len, nor past the step's token budget.
    const int32_t room = std::min({r->sampling.max_tokens - r->num_output_tokens(),
                                   config_.max_model_len - r->num_tokens(), budget.tokens_left() - 1, step_drafts_});
    std::vector<TokenId> drafts = propose_drafts(*r, config_.speculative, room);
    if (drafts.empty()) return false;
    const int32_t n = 1 + static_cast<int32_t>(drafts.size());
    auto blocks = kv_.allocate_slots(*r, n);
    if (!blocks) return false;  // the plain decode path may preempt for its one slot
    out.requests.push_back(ScheduledRequest{r, n, std::move(blocks->block_ids), true, std::move(drafts)});
    budget.consume(n);
    return true;
}

void Scheduler::schedule_waiting(TokenBudget& budget, ScheduledBatch& out) {
    while (!waiting_.empty() && budget.has_room()) {
        Request* r = waiting_.front();
        const CachedPrefix prefix = kv_.find_cached_prefix(*r);
        const int32_t n = budget.grant(r->num_tokens() - prefix.num_tokens, config_.enable_chunked_prefill);
        if (!admissible(*r, n, prefix)) break;  // FCFS: nobody overtakes the head
        auto blocks = kv_.allocate_slots(*r, n, prefix);
        MOESERVE_CHECK(blocks.has_value(), "{}: admissible but allocation failed", r->request_id);
        waiting_.pop_front();
        if (r->num_cached_tokens < 0) {
            r->num_cached_tokens = prefix.num_tokens;
            r->queue_seconds = std::max(0.0, steady_seconds() - r->added_at);
        }
        r->status = RequestStatus::kRunning;
        running_.push_back(r);
        out.requests.push_back(ScheduledRequest{r, n, std::move(blocks->block_ids), false, {}});
        budget.consume(n);
    }
}

ScheduledBatch Scheduler::schedule(std::optional<Phase> forced) {
    ScheduledBatch out;
    if (!forced && policy_->separates_phases()) {
        forced = policy_->decide_phase(demand()).phase;
    }
    const StepPlan plan = policy_->plan(forced);
    if (config_.speculative.enabled()) {
        if (const int32_t decodes = num_running_decodes(); decodes > 0) step_drafts_ = draft_budget_.next(decodes);
    }
    TokenBudget budget(config_.max_num_batched_tokens, config_.max_num_seqs);
    schedule_running(plan, budget, out);
    // NOTE(#5): no admissions in a step that preempted: the cache is full (vLLM does the same).
    if (plan.admit_waiting && out.preempted.empty()) schedule_waiting(budget, out);
    bool any_prefill = false, any_decode = false;
    for (const auto& s : out.requests) {
        out.num_tokens += s.num_tokens;
        if (s.is_decode) {
            any_decode = true;
        } else {
            any_prefill = true;
            out.num_prefill_tokens += s.num_tokens;
        }
    }
    out.dummy = out.requests.empty();
    out.wants_head_drafts = config_.speculative.enabled() && draft_budget_.may_draft_next();
    out.phase = any_prefill && any_decode ? Phase::kMixed
                : any_prefill             ? Phase::kPrefill
                : any_decode              ? Phase::kDecode
                                          : (forced ? *forced : Phase::kIdle);
    return out;
}

bool Scheduler::check_stop(Request& r) const {
    const TokenId last = r.output_token_ids.back();
    const auto& s = r.sampling;
    if (r.num_output_tokens() >= s.min_tokens) {  // vLLM: no stop of any kind before min_tokens
        // stop_token_ids holds the EOS set too, unless the request ignores EOS (validate_request).
        if (std::find(s.stop_token_ids.begin(), s.stop_token_ids.end(), last) != s.stop_token_ids.end()) {
            r.stop_token_id = last;
            r.finish_reason = FinishReason::kStop;
            return true;
        }
    }
    if (r.num_output_tokens() >= s.max_tokens || r.num_tokens() >= config_.max_model_len) {
        r.finish_reason = FinishReason::kLength;
        return true;
    }
    return false;
}

std::vector<ipc::RequestOutput> Scheduler::update(const ScheduledBatch& batch, const StepResult& result) {
    MOESERVE_CHECK(result.sampled.size() == batch.requests.size(), "step result for {} of {} requests",
                   result.sampled.size(), batch.requests.size());
    std::vector<ipc::RequestOutput> outputs = take_finished();
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        const ScheduledRequest& s = batch.requests[i];
        Request* r = s.request;
        const bool samples = s.samples();
        // Drafts count once accepted (append_tokens); a rejected draft's KV is not the request's.
        r->num_computed_tokens += s.num_tokens - s.num_drafts();
        if (!s.is_decode) counters_.num_prompt_tokens += s.num_tokens;
        if (i < result.prompt_logprobs.size() && r->wants_prompt_logprobs()) {
            const auto& chunk = result.prompt_logprobs[i];
            r->prompt_logprobs.insert(r->prompt_logprobs.end(), chunk.begin(), chunk.end());
        }
        if (!samples) continue;
        MOESERVE_CHECK(result.sampled[i].has_value(), "{}: no token sampled at the end of its tokens", r->request_id);
        std::vector<SampledToken> tokens;
        if (i < result.accepted_drafts.size()) tokens = result.accepted_drafts[i];
        if (s.num_drafts() > 0) count_drafts(s, tokens.size());
        tokens.push_back(*result.sampled[i]);
        ipc::RequestOutput out = output_of(*r);
        if (r->sampling.prompt_logprobs && !r->prompt_logprobs_sent) {
            out.prompt_logprobs = std::move(r->prompt_logprobs);
            r->prompt_logprobs.clear();
            r->prompt_logprobs_sent = true;
        }
        std::string grammar_error;
        if (!append_tokens(s, tokens, out, grammar_error)) {
            const ipc::RequestOutput fin = finish(r, grammar_error.empty() ? r->finish_reason : FinishReason::kError);
            out.finish_reason = fin.finish_reason;
            out.stop_token_id = fin.stop_token_id;
            out.error = std::move(grammar_error);
        } else if (i < result.head_drafts.size()) {
            r->head_drafts = result.head_drafts[i];
            r->head_drafts_at = r->num_tokens();
        }
        outputs.push_back(std::move(out));
    }
    if (connector_) connector_->outputs_ready(outputs);
    return outputs;
}

bool Scheduler::append_tokens(const ScheduledRequest& s, std::span<const SampledToken> tokens, ipc::RequestOutput& out,
                              std::string& grammar_error) {
    Request* r = s.request;
    for (size_t j = 0; j < tokens.size(); ++j) {
        if (r->constrained() && !r->grammar->accept_token(tokens[j].token_id)) {
            // Only when no token of the vocabulary can continue the grammar (the mask was empty).
            grammar_error =
                !r->grammar->error().empty()
                    ? "structured output: " + r->grammar->error()
                    : fmt::format(
                          "structured output: no token of the vocabulary can continue the grammar after {} tokens",
                          r->num_output_tokens());
            return false;
        }
        // Token j > 0 follows an accepted draft, whose KV this step computed.
        if (j > 0) ++r->num_computed_tokens;
        r->append_output(tokens[j].token_id);
        ++counters_.num_generation_tokens;
        out.new_token_ids.push_back(tokens[j].token_id);
        if (tokens[j].logprobs) out.new_logprobs.push_back(*tokens[j].logprobs);
        if (check_stop(*r)) {
            // As a plain run would: the full blocks of computed, accepted tokens are in the cache.
            if (s.num_drafts() > 0) kv_.cache_blocks(*r, r->num_computed_tokens);
            return false;
        }
    }
    if (s.num_drafts() > 0) {
        kv_.cache_blocks(*r, r->num_computed_tokens);
        kv_.free_tail(*r, r->num_computed_tokens);  // the blocks only rejected drafts used
    }
    return true;
}

void Scheduler::record_step_time(const ScheduledBatch& batch, double seconds) {
    if (config_.speculative.enabled() && batch.phase == Phase::kDecode)
        draft_budget_.record_step(batch.num_tokens, seconds);
}

void Scheduler::count_drafts(const ScheduledRequest& s, size_t num_accepted) {
    draft_budget_.record_drafts(s.num_drafts(), static_cast<int32_t>(num_accepted));
    ++counters_.num_drafts;
    counters_.num_draft_tokens += s.num_drafts();
    counters_.num_accepted_tokens += static_cast<int64_t>(num_accepted);
    auto& per_pos = counters_.num_accepted_tokens_per_pos;
    if (per_pos.size() < num_accepted) per_pos.resize(num_accepted);
    for (size_t j = 0; j < num_accepted; ++j) ++per_pos[j];
}

std::vector<ipc::RequestOutput> Scheduler::take_finished() {
    std::vector<ipc::RequestOutput> out;
    out.swap(finished_);
    if (connector_) connector_->outputs_ready(out);
    return out;
}

int32_t Scheduler::num_running_decodes() const {
    return static_cast<int32_t>(
        std::count_if(running_.begin(), running_.end(), [](const Request* r) { return r->is_decode(); }));
}

PhaseDemand Scheduler::demand() {
    PhaseDemand d{.can_prefill = false, .has_decode = false};
    for (const Request* r : running_) (r->is_decode() ? d.has_decode : d.can_prefill) = true;
    if (!d.can_prefill && !waiting_.empty()) {
        Request* r = waiting_.front();
        const CachedPrefix prefix = kv_.find_cached_prefix(*r);
        const int32_t n = std::min(r->num_tokens() - prefix.num_tokens, config_.max_num_batched_tokens);
        d.can_prefill = admissible(*r, n, prefix);
    }
    return d;
}

}  // namespace moeserve::engine
