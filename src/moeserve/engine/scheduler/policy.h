// SchedulingPolicy: which kinds of work one engine step may run. The mixed policy (vLLM) runs
// decodes, prefill chunks and admissions together; the PD-hybrid policy (policy_pd_hybrid.h)
// restricts a step to one phase. A phase can also be forced from outside (DP lock-step: the
// DpCoordinator forces the phase decide_phase chose from the group's demand).
#pragma once

#include <optional>

#include "moeserve/core/step_phase.h"

namespace moeserve::engine {

// The engine's short name for the one step-phase enum (core/step_phase.h), the same type the DP
// vote carries. Forcing kMixed is the same as not forcing; a policy reports kMixed for a step
// that ran prefill and decode tokens together.
using Phase = StepPhase;

// What a step may schedule.
struct StepPlan {
    bool run_decodes = true;    // running requests with one token left (decode)
    bool run_prefills = true;   // running requests with a prompt/recompute chunk left
    bool admit_waiting = true;  // waiting requests may start (their first chunk runs this step)
};

// The phase a step nobody forced runs, and whether PD hybrid's starvation guard chose it.
struct PhaseDecision {
    Phase phase = Phase::kIdle;
    bool guard_fired = false;  // a decode step the guard took from prefill
};

class SchedulingPolicy {
public:
    virtual ~SchedulingPolicy() = default;
    virtual const char* name() const = 0;
    // The plan for the next step. forced: a phase imposed from outside, or nullopt.
    virtual StepPlan plan(std::optional<Phase> forced) const = 0;
    // True when a step runs one phase only (PD hybrid): an unforced step then runs the phase
    // decide_phase() gives; false: plan() alone decides what an unforced step mixes.
    virtual bool separates_phases() const { return false; }
    // The engine's one phase decision, from what could run now: this scheduler's demand (one
    // rank) or the OR over a DP group's votes (DpCoordinator, every rank with the same demand in
    // the same order, hence the same decision). Advances the policy's state as if the step ran.
    // This default (no phase split): kMixed when anything can run, else kIdle.
    virtual PhaseDecision decide_phase(PhaseDemand demand) {
        return {.phase = demand.can_prefill || demand.has_decode ? Phase::kMixed : Phase::kIdle, .guard_fired = false};
    }
    // The DP group re-formed (self-healing): the decisions start over, as they do in a replaced
    // rank's new engine, so every rank decides alike again.
    virtual void restart_phase_decisions() {}
};

}  // namespace moeserve::engine
