// EngineCore: one rank's engine, callable in-process: step() = schedule -> execute -> update
// (vLLM's EngineCore; the process loop with IPC and DP coordination goes around it). Owns its
// KV cache manager, scheduler, sampler and model runner; borrows the model and thread pool.
// Not thread-safe: every call from one thread (the engine thread).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/engine/grammar_compile_worker.h"
#include "moeserve/engine/kv_cache/kv_cache_manager.h"
#include "moeserve/engine/kv_transfer/pd_kv_connector.h"
#include "moeserve/engine/model_runner.h"
#include "moeserve/engine/sampler.h"
#include "moeserve/engine/scheduler/scheduler.h"
#include "moeserve/ipc/messages.h"
#include "moeserve/model/model.h"
#include "moeserve/structured/matcher.h"

namespace moeserve::engine {

struct EngineConfig {
    int32_t max_num_seqs = 256;
    int32_t max_num_batched_tokens = 2048;
    int32_t max_model_len = 4096;
    int32_t block_size = 16;
    int32_t num_blocks = 0;  // KV blocks incl. the null block (see num_blocks_for_bytes)
    bool enable_prefix_caching = true;
    bool enable_chunked_prefill = true;
    uint64_t seed = 0;  // streams of requests without their own seed derive from it
    int32_t engine_index = 0;
    SchedulingOrder scheduling_order = SchedulingOrder::kFcfs;  // --scheduling-policy
    SpeculativeConfig speculative;                              // --speculative-config
    // The bytes of each token id, for structured outputs (requests with sampling.grammar); null:
    // such requests are rejected. The cli decodes it from the model's tokenizer.
    std::shared_ptr<const structured::Vocabulary> vocabulary;
    // PD disaggregation (--kv-transfer-config): this engine's role; kNone = neither.
    KvTransferConfig kv_transfer{};
    Logger* logger = nullptr;  // for the KV transfer's warnings; null = silent
};

struct StepOutcome {
    std::vector<ipc::RequestOutput> outputs;
    Phase phase = Phase::kIdle;  // what ran (kMixed: prefill and decode tokens together)
    bool dummy = true;           // nothing of the (forced) phase to run; no real forward happened
    bool dummy_forward = false;  // a dummy batch ran through the model instead (step_lockstep)
    int32_t num_tokens = 0;      // tokens computed in the forward
};

class EngineCore {
public:
    // model and pool must outlive the engine. policy: null = MixedPolicy. Raises Error
    // kInvalidArgument for inconsistent limits (e.g. fewer than 2 blocks).
    EngineCore(model::Model& model, ThreadPool& pool, const EngineConfig& config,
               std::unique_ptr<SchedulingPolicy> policy = nullptr);

    // Queues a request made by ipc::validate_request (its values are trusted, not checked
    // again). What only the engine can refuse (more KV blocks than the cache has, a duplicate
    // id, a grammar that does not compile, a KV-transfer role this instance lacks) comes back as
    // a kError output from the next step, never as an exception. A grammar not compiled yet is
    // compiled on a worker thread; the request joins the scheduler once it is ready
    // (poll_grammar_compiles).
    void add_request(const ipc::AddRequest& add);
    // Frees the requests' blocks now (Scheduler::abort_requests); each comes back as a kAbort
    // output from the next step.
    void abort(const ipc::Abort& abort);

    // Self-healing (docs/parallelism.md): a step failed because the group's collectives did (a
    // rank died). Fails the running requests with `reason` and forgets the prefix cache; waiting
    // requests stay. Returns the failed requests' outputs.
    std::vector<ipc::RequestOutput> fail_running(const std::string& reason);

    // Runs one step. forced: the phase to run (PD hybrid, DP lock-step); kIdle runs a dummy step.
    StepOutcome step(std::optional<Phase> forced = std::nullopt);
    // DP lock-step (DpCoordinator): step(forced) with the MoE exchange the DP group agreed on; when
    // nothing of the phase gets scheduled and dummy_forward is set, a dummy batch runs through the
    // model (ModelRunner::execute_dummy) so this rank joins the step's collectives anyway.
    StepOutcome step_lockstep(std::optional<Phase> forced, parallel::MoeExchangeKind exchange, bool dummy_forward);
    // Outputs produced outside a step (rejected, aborted, remote prefills fetched, a producer's
    // announcement of its KV endpoint so that a streamed transfer can start while it prefills),
    // without stepping.
    std::vector<ipc::RequestOutput> take_finished() { return scheduler_.take_finished(); }
    bool has_pending_outputs() const { return scheduler_.has_pending_outputs(); }
    // PD disaggregation (Scheduler::poll_kv_connector): frees the blocks consumers released,
    // starts fetches for consumer requests that have blocks now, and turns finished fetches into
    // running requests (their first outputs come from take_finished() or the next step). Every
    // step calls it first; an idle engine loop calls it too. No-op without --kv-transfer-config.
    void poll_kv_transfers() { scheduler_.poll_kv_connector(); }
    // Consumer requests queued for or in a KV fetch (they are not runnable yet).
    bool has_pending_kv_transfers() const { return scheduler_.num_remote_waiting() > 0; }
    int32_t num_pending_kv_transfers() const { return scheduler_.num_remote_waiting(); }
    // Hands the requests whose grammars finished compiling to the scheduler (a grammar that
    // failed: a kError output). Every step calls it first; an idle engine loop calls it too.
    void poll_grammar_compiles();
    // Requests whose grammar is being compiled (they are not runnable yet).
    bool has_compiling_grammars() const { return !compiling_.empty(); }
    // The KV transfer agents, null without --kv-transfer-config.
    const KvTransferGroup* kv_transfer() const { return kv_connector_ ? &kv_connector_->group() : nullptr; }
    // Running requests whose next step is a decode.
    int32_t num_running_decodes() const { return scheduler_.num_running_decodes(); }
    // What this core could run now (Scheduler::demand), and the policy's phase decision from a
    // demand: the DP coordinator's, from the whole group's (SchedulingPolicy::decide_phase).
    PhaseDemand demand() { return scheduler_.demand(); }
    PhaseDecision decide_phase(PhaseDemand demand) { return scheduler_.decide_phase(demand); }
    void restart_phase_decisions() { scheduler_.restart_phase_decisions(); }

    // Requests held, compiling ones included: callers that loop until everything finished
    // (generate, tests) need not know about compiles; step() waits for one when nothing else runs.
    bool has_unfinished_requests() const { return scheduler_.has_unfinished_requests() || has_compiling_grammars(); }
    ipc::Stats stats() const;
    const KvCacheManager& kv_cache_manager() const { return kv_; }
    const Scheduler& scheduler() const { return scheduler_; }
    const EngineConfig& config() const { return config_; }

private:
    EngineConfig config_;
    model::Model& model_;
    KvCacheManager kv_;
    Scheduler scheduler_;
    Sampler sampler_;
    ModelRunner runner_;
    std::unique_ptr<structured::GrammarCompiler> grammars_;  // compiled grammars by text
    std::unique_ptr<GrammarCompileWorker> grammar_worker_;   // after grammars_: it compiles with it
    std::map<int64_t, std::unique_ptr<Request>> compiling_;  // by arrival number (a ticket)
    void add_grammar(std::unique_ptr<Request> request, const std::string& gbnf);
    std::unique_ptr<PdKvConnector> kv_connector_;  // after runner_: it uses its KV storage
    int64_t num_added_ = 0;
    ipc::Stats stats_;
};

}  // namespace moeserve::engine
