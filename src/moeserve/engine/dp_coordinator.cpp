// DpCoordinator: vote -> one DP control all-gather -> forced-phase step or dummy step.
#include "moeserve/engine/dp_coordinator.h"

#include "moeserve/core/error.h"

namespace moeserve::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const DpCoordinatorOptions& checked(const DpCoordinatorOptions& o, const EngineCore& core) {
    if (!o.pd_hybrid && core.scheduler().policy().separates_phases()) {
        raise(ErrorCode::kInvalidArgument,
              "the engine's scheduling policy is '{}' but the DP coordinator runs without --pd-hybrid; both must "
              "agree, or DP ranks would pick their phases on their own",
              core.scheduler().policy().name());
    }
    if (o.idle_wait_ms < 0) raise(ErrorCode::kInvalidArgument, "idle_wait_ms must be >= 0; got {}", o.idle_wait_ms);
    return o;
}

}  // namespace

DpCoordinator::DpCoordinator(EngineCore& core, parallel::Communicator& dp, const DpCoordinatorOptions& options)
    : core_(core), dp_(dp), options_(checked(options, core)), selector_(options.max_consecutive_prefill_steps) {}

parallel::DpVote DpCoordinator::vote() {
    parallel::DpVote v;
    const int32_t decodes = core_.num_running_decodes();
    // "can prefill now": a prefill chunk is running or the head waiting request is admissible (KV
    // blocks and max-num-seqs) -- never just "has waiting requests" (issue #8).
    v.can_prefill = core_.propose_phase() == Phase::kPrefill;
    v.has_decode = decodes > 0;
    // Compiling requests are not work the group can step yet: the idle loop polls their compiles.
    v.has_unfinished = core_.scheduler().has_unfinished_requests();
    v.num_tokens = decodes;  // tokens a decode step of this rank runs (prefill sizes vary per step)
    const auto& s = core_.scheduler();
    v.shutdown = shutdown_requested_;
    v.num_reqs = s.num_running() + s.num_waiting();
    v.forced_phase = options_.debug_force_phase;
    return v;
}

StepPhase DpCoordinator::choose_phase(const std::vector<parallel::DpControlRow>& rows,
                                      const parallel::DpAgreement& agreement, bool& guard_fired) {
    guard_fired = false;
    if (options_.debug_force_phase >= 0 || !options_.pd_hybrid) return agreement.phase;
    bool any_prefill = false, any_decode = false;
    for (const auto& row : rows) {
        const parallel::DpVote v = parallel::decode_vote(row);
        any_prefill |= v.can_prefill;
        any_decode |= v.has_decode;
    }
    // Same flags in the same order on every rank -> the same selector state and phase everywhere.
    const StepPhase p = selector_.next(any_prefill, any_decode);
    guard_fired = selector_.guard_fired();
    return p;
}

DpStepResult DpCoordinator::step() {
    DpStepResult out;
    dp_.begin_step();
    const parallel::DpVote my_vote = vote();
    const auto t0 = Clock::now();
    const std::vector<parallel::DpControlRow> rows = parallel::gather_votes(dp_, my_vote);
    counters_.control_seconds += seconds_since(t0);
    const int64_t round = counters_.rounds++;
    out.agreement = parallel::agree(rows, dp_.rank(), options_.pd_hybrid);

    out.shutdown = out.agreement.shutdown;
    out.phase = out.shutdown ? StepPhase::kIdle : choose_phase(rows, out.agreement, out.guard_decode);
    global_has_work_ = !out.shutdown && (out.agreement.any_unfinished || out.phase != StepPhase::kIdle);
    if (out.phase == StepPhase::kIdle) {
        // No forward anywhere: only hand out what finished outside a step (rejections, aborts).
        ++counters_.idle_rounds;
        out.outputs = core_.take_finished();
    } else {
        std::optional<Phase> forced;
        parallel::MoeExchangeKind exchange = options_.mixed_exchange;
        if (out.phase == StepPhase::kPrefill) {
            forced = Phase::kPrefill;
            exchange = options_.prefill_exchange;
            ++counters_.prefill_steps;
            counters_.decode_requests_stalled += core_.num_running_decodes();
        } else if (out.phase == StepPhase::kDecode) {
            forced = Phase::kDecode;
            exchange = options_.decode_exchange;
            ++counters_.decode_steps;
            counters_.guard_decode_steps += out.guard_decode ? 1 : 0;
        } else {
            ++counters_.mixed_steps;
        }
        const auto t1 = Clock::now();
        StepOutcome o = core_.step_lockstep(forced, exchange, options_.dummy_forward && dp_.size() > 1);
        counters_.forward_seconds += seconds_since(t1);
        out.outputs = std::move(o.outputs);
        out.dummy = o.dummy;
        out.num_tokens = o.num_tokens;
        if (o.dummy) {
            (out.phase == StepPhase::kPrefill  ? counters_.dummy_prefill_steps
             : out.phase == StepPhase::kDecode ? counters_.dummy_decode_steps
                                               : counters_.dummy_mixed_steps) += 1;
        }
    }
    if (options_.record_timeline) {
        timeline_.push_back({round, out.phase, out.dummy, out.num_tokens, my_vote.can_prefill, my_vote.has_decode});
    }
    return out;
}

}  // namespace moeserve::engine
