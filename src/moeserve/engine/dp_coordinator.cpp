// DpCoordinator: vote -> one DP control all-gather -> forced-phase step or dummy step.
#include "moeserve/engine/dp_coordinator.h"

#include "moeserve/core/error.h"

namespace moeserve::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const DpCoordinatorOptions& checked(const DpCoordinatorOptions& o) {
    if (o.idle_wait_ms < 0) raise(ErrorCode::kInvalidArgument, "idle_wait_ms must be >= 0; got {}", o.idle_wait_ms);
    return o;
}

}  // namespace

DpCoordinator::DpCoordinator(EngineCore& core, parallel::Communicator& dp, const DpCoordinatorOptions& options)
    : core_(core), dp_(dp), options_(checked(options)) {}

parallel::DpVote DpCoordinator::vote() {
    const PhaseDemand demand = core_.demand();
    const auto& s = core_.scheduler();
    return {.can_prefill = demand.can_prefill,
            .has_decode = demand.has_decode,
            // Compiling requests are not work the group can step yet: the idle loop polls their compiles.
            .has_unfinished = s.has_unfinished_requests(),
            .shutdown = shutdown_requested_,
            .num_tokens = core_.num_running_decodes(),  // a decode step's tokens (prefill sizes vary per step)
            .num_reqs = s.num_running() + s.num_waiting()};
}

// The one phase decision: the policy's, from the group's demand. Every rank feeds its policy the
// same demand in the same order, so every rank decides the same phase.
PhaseDecision DpCoordinator::decide_phase(const parallel::DpAgreement& agreement) {
    if (agreement.shutdown) return {.phase = StepPhase::kIdle, .guard_fired = false};
    PhaseDecision d = core_.decide_phase(agreement.demand);
    if (options_.debug_force_phase >= 0) d.phase = static_cast<StepPhase>(options_.debug_force_phase);
    return d;
}

DpStepResult DpCoordinator::step() {
    DpStepResult out;
    dp_.begin_step();
    const parallel::DpVote my_vote = vote();
    const auto t0 = Clock::now();
    const std::vector<parallel::DpControlRow> rows = parallel::gather_votes(dp_, my_vote);
    counters_.control_seconds += seconds_since(t0);
    const int64_t round = counters_.rounds++;
    out.agreement = parallel::agree(rows);
    out.shutdown = out.agreement.shutdown;
    const PhaseDecision decision = decide_phase(out.agreement);
    out.phase = decision.phase;
    out.guard_decode = decision.guard_fired;
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
