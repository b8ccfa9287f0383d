#include "moeserve/engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "moeserve/core/error.h"
#include "moeserve/engine/scheduler/policy_mixed.h"

namespace moeserve::engine {

namespace {

// How long step() waits for a compile when nothing else can run (a few steps' worth).
constexpr int kCompileWaitMs = 5;

SchedulerConfig scheduler_config(const EngineConfig& c) {
    return SchedulerConfig{.max_num_seqs = c.max_num_seqs,
                           .max_num_batched_tokens = c.max_num_batched_tokens,
                           .max_model_len = c.max_model_len,
                           .enable_chunked_prefill = c.enable_chunked_prefill,
                           .order = c.scheduling_order,
                           .speculative = c.speculative};
}

const EngineConfig& checked(const EngineConfig& c) {
    if (c.num_blocks < 2) {
        raise(ErrorCode::kInvalidArgument,
              "the KV cache has {} blocks; it needs at least 2 (give it more memory with --kv-cache-memory or "
              "--gpu-memory-utilization)",
              c.num_blocks);
    }
    if (c.block_size < 1) raise(ErrorCode::kInvalidArgument, "--block-size must be >= 1; got {}", c.block_size);
    return c;
}

}  // namespace

EngineCore::EngineCore(model::Model& model, ThreadPool& pool, const EngineConfig& config,
                       std::unique_ptr<SchedulingPolicy> policy)
    : config_(checked(config)),
      model_(model),
      kv_(config.num_blocks, config.block_size, config.enable_prefix_caching),
      scheduler_(scheduler_config(config), kv_, policy ? std::move(policy) : std::make_unique<MixedPolicy>()),
      sampler_(model.info().vocab_size, &pool),
      runner_(model, sampler_, config.num_blocks, config.block_size) {
    stats_.engine_index = config.engine_index;
    if (config.vocabulary) grammars_ = std::make_unique<structured::GrammarCompiler>(config.vocabulary);
    if (config.kv_transfer.role != KvTransferConfig::Role::kNone) {
        // With TP the model is the leader's decorator, which reaches the followers' agents.
        kv_connector_ =
            std::make_unique<PdKvConnector>(config.kv_transfer, runner_.kv_cache(), config.engine_index,
                                            dynamic_cast<TpKvLink*>(&model), config.logger, config.block_size);
        scheduler_.set_kv_connector(kv_connector_.get());
    }
}

void EngineCore::add_request(const ipc::AddRequest& add) {
    // A request without a seed gets a stream derived from the engine seed, the engine's index
    // and its arrival order: a whole run is reproducible from --seed, and two DP engines (same
    // --seed, same arrival counts) never hand out the same stream.
    uint64_t state = config_.seed ^ (0x5851f42d4c957f2dull * static_cast<uint64_t>(++num_added_)) ^
                     (0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(config_.engine_index) + 1));
    const uint64_t seed = add.sampling.seed ? *add.sampling.seed : Rng::splitmix64(state);
    auto request = std::make_unique<Request>(add.request_id, add.prompt_token_ids, add.sampling, seed, num_added_);
    request->priority = add.priority;
    request->kv_transfer = add.kv_transfer;
    request->error = kv_transfer_refusal(add.kv_transfer, config_.kv_transfer);
    if (add.sampling.grammar.empty() || !request->error.empty()) {
        scheduler_.add_request(std::move(request));
    } else if (!grammars_) {
        request->error = "structured outputs need the tokenizer's vocabulary, which this engine was started without";
        scheduler_.add_request(std::move(request));
    } else {
        add_grammar(std::move(request), add.sampling.grammar);
    }
}

void EngineCore::add_grammar(std::unique_ptr<Request> request, const std::string& gbnf) {
    request->grammar_active = request->sampling.grammar_after_token_ids.empty();
    if (auto hit = grammars_->cached(gbnf)) {
        request->grammar = std::make_unique<structured::GrammarMatcher>(std::move(hit));
        scheduler_.add_request(std::move(request));
        return;
    }
    if (!grammar_worker_) grammar_worker_ = std::make_unique<GrammarCompileWorker>(*grammars_);
    grammar_worker_->submit(num_added_, gbnf);
    compiling_.emplace(num_added_, std::move(request));
}

void EngineCore::poll_grammar_compiles() {
    if (compiling_.empty()) return;
    for (auto& done : grammar_worker_->take_done()) {
        const auto it = compiling_.find(done.ticket);
        if (it == compiling_.end()) continue;  // aborted while it compiled
        std::unique_ptr<Request> request = std::move(it->second);
        compiling_.erase(it);
        if (done.grammar) {
            request->grammar = std::make_unique<structured::GrammarMatcher>(std::move(done.grammar));
        } else {  // a bad grammar fails this request (a kError output), not the engine
            request->error = "structured output: " + done.error;
        }
        scheduler_.add_request(std::move(request));
    }
}

std::vector<ipc::RequestOutput> EngineCore::fail_running(const std::string& reason) {
    scheduler_.fail_running(reason);
    kv_.reset_prefix_cache();
    return scheduler_.take_finished();
}

void EngineCore::abort(const ipc::Abort& abort) {
    // A request still compiling joins the scheduler now, to leave it as every aborted one does
    // (a kAbort output); its compile finishes unused.
    for (const auto& id : abort.request_ids) {
        for (auto it = compiling_.begin(); it != compiling_.end(); ++it) {
            if (it->second->request_id != id) continue;
            scheduler_.add_request(std::move(it->second));
            compiling_.erase(it);
            break;
        }
    }
    scheduler_.abort_requests(abort.request_ids);
}

StepOutcome EngineCore::step(std::optional<Phase> forced) {
    // Only compiles pending: wait a little for one rather than let a caller's loop spin on empty steps.
    if (!scheduler_.has_unfinished_requests() && has_compiling_grammars()) {
        grammar_worker_->wait_for_done(std::chrono::milliseconds(kCompileWaitMs));
    }
    return step_lockstep(forced, runner_.moe_exchange(), false);
}

StepOutcome EngineCore::step_lockstep(std::optional<Phase> forced, parallel::MoeExchangeKind exchange,
                                      bool dummy_forward) {
    StepOutcome out;
    scheduler_.poll_kv_connector();
    poll_grammar_compiles();
    runner_.set_moe_exchange(exchange);
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const ScheduledBatch batch = scheduler_.schedule(forced);
    const auto t1 = Clock::now();
    const StepResult result = runner_.execute(batch);
    if (batch.dummy && dummy_forward) {
        runner_.execute_dummy();
        out.dummy_forward = true;
    }
    const auto t2 = Clock::now();
    scheduler_.record_step_time(batch, std::chrono::duration<double>(t2 - t1).count());
    out.outputs = scheduler_.update(batch, result);
    stats_.step_schedule_seconds += std::chrono::duration<double>(t1 - t0).count();
    stats_.step_update_seconds += std::chrono::duration<double>(Clock::now() - t2).count();
    out.phase = batch.phase;
    out.dummy = batch.dummy;
    out.num_tokens = batch.num_tokens;
    ++stats_.num_steps;
    if (!batch.dummy) {
        auto& steps = stats_.iteration_token_steps;
        steps.resize(std::size(ipc::kIterationTokenBuckets) + 1);
        size_t b = 0;
        while (b < std::size(ipc::kIterationTokenBuckets) && batch.num_tokens > ipc::kIterationTokenBuckets[b]) ++b;
        ++steps[b];
        stats_.iteration_tokens_sum += batch.num_tokens;
    }
    if (batch.dummy) {
        ++stats_.num_dummy_steps;
    } else if (batch.num_prefill_tokens > 0) {
        ++stats_.num_prefill_steps;
    } else {
        ++stats_.num_decode_steps;
    }
    return out;
}

ipc::Stats EngineCore::stats() const {
    ipc::Stats s = stats_;
    s.num_running = scheduler_.num_running();
    s.num_waiting = scheduler_.num_waiting() + static_cast<int32_t>(compiling_.size());
    s.kv_cache_usage = kv_.pool().usage();
    s.step_prepare_seconds = runner_.times().prepare;
    s.step_forward_seconds = runner_.times().forward;
    s.step_sample_seconds = runner_.times().sample;
    s.prefix_cache_queries = kv_.prefix_cache_queries();
    s.prefix_cache_hits = kv_.prefix_cache_hits();
    const auto& c = scheduler_.counters();
    s.num_preemptions = c.num_preemptions;
    s.num_prompt_tokens = c.num_prompt_tokens;
    s.num_generation_tokens = c.num_generation_tokens;
    s.spec_num_drafts = c.num_drafts;
    s.spec_num_draft_tokens = c.num_draft_tokens;
    s.spec_num_accepted_tokens = c.num_accepted_tokens;
    s.spec_num_accepted_tokens_per_pos = c.num_accepted_tokens_per_pos;
    s.spec_draft_budget = scheduler_.draft_budget().current();
    if (const model::ExpertLoadStats* eplb = model_.expert_load()) {
        s.eplb_rank_load = eplb->rank_load;
        s.eplb_imbalance = eplb->imbalance;
        s.eplb_decisions = eplb->decisions;
        s.eplb_rebalances = eplb->rebalances;
        s.eplb_moved_experts = eplb->moved_slots;
    }
    if (kv_connector_) {
        const KvTransferCounters k = kv_connector_->group().counters();
        s.kv_sent_bytes = k.sent_bytes;
        s.kv_sent_transfers = k.sent_transfers;
        s.kv_expired_transfers = k.expired_transfers;
        s.kv_send_seconds = k.send_seconds;
        s.kv_received_bytes = k.received_bytes;
        s.kv_received_transfers = k.received_transfers;
        s.kv_failed_transfers = k.failed_transfers;
        s.kv_receive_seconds = k.receive_seconds;
        s.kv_wait_seconds = k.wait_seconds;
        s.kv_held_transfers = scheduler_.num_held();
        s.kv_waiting_requests = scheduler_.num_remote_waiting();
    }
    return s;
}

}  // namespace moeserve::engine
