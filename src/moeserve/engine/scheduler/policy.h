// SchedulingPolicy: which kinds of work one engine step may run. The mixed policy (vLLM) runs
// decodes, prefill chunks and admissions together; the PD-hybrid policy (policy_pd_hybrid.h)
// restricts a step to one phase. A phase can also be forced from outside (DP lock-step, PD-hybrid coordinator).
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

class SchedulingPolicy {
public:
    virtual ~SchedulingPolicy() = default;
    virtual const char* name() const = 0;
    // The plan for the next step. forced: a phase imposed from outside, or nullopt.
    virtual StepPlan plan(std::optional<Phase> forced) const = 0;
    // True when an unforced step asks choose_phase() (PD hybrid); false: plan() alone decides.
    virtual bool separates_phases() const { return false; }
    // The phase of a step nobody forced, from what the scheduler could run now (can_prefill: a
    // prefill chunk or an admissible waiting request; has_decode: a running request decodes).
    // Called once per unforced step, before plan(). nullopt (the default): the plan mixes phases.
    virtual std::optional<Phase> choose_phase(bool can_prefill, bool has_decode) {
        (void)can_prefill;
        (void)has_decode;
        return std::nullopt;
    }
};

}  // namespace moeserve::engine
