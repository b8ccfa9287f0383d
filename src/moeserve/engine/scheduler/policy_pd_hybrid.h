// PD-hybrid scheduling (docs/architecture.md "DP step protocol", step 3): a step runs prefill only or
// decode only, never both; prefill has priority, bounded by a starvation guard so decodes that wait
// behind a stream of prefills still run every few steps (TPOT stays bounded).
//
//   can_prefill has_decode  guard run < bound  -> phase
//        1          0             -               PREFILL
//        1          1             yes             PREFILL   (run of prefills while decodes wait +1)
//        1          1             no              DECODE    (run reset)
//        0          1             -               DECODE
//        0          0             -               IDLE
#pragma once

#include <cstdint>

#include "moeserve/engine/scheduler/policy.h"

namespace moeserve::engine {

// Default bound on consecutive prefill steps while decodes wait (docs/pd_hybrid.md, measured on
// the tiny Qwen3-MoE under a stream of arrivals: the worst decode gap is 5 steps, and prefill
// keeps 80% of the steps, enough that new prompts' TTFT stays as without the guard; 1-2 let
// the prompt queue grow, 8-16 only lengthen the gap).
constexpr int32_t kDefaultMaxConsecutivePrefillSteps = 4;

// PD hybrid's phase table with its guard state (PdHybridPolicy::decide_phase). Deterministic: every
// DP rank that feeds it the same global flags in the same order reaches the same phases.
class HybridPhaseSelector {
public:
    // max_consecutive_prefill_steps: prefill steps in a row while decodes wait before one decode
    // step is taken; 0 = unbounded (prefill always first). Raises kInvalidArgument if < 0.
    explicit HybridPhaseSelector(int32_t max_consecutive_prefill_steps = kDefaultMaxConsecutivePrefillSteps);

    // The next step's phase (kPrefill, kDecode or kIdle) and advances the guard as if it ran.
    // Returns kDecode for a step the guard took from prefill; guard_fired() tells which.
    Phase next(bool can_prefill, bool has_decode);

    bool guard_fired() const { return guard_fired_; }     // the last next() was the guard's
    int32_t stalled_run() const { return stalled_run_; }  // prefill steps in a row with decodes waiting
    int32_t max_consecutive_prefill_steps() const { return bound_; }

private:
    int32_t bound_;
    int32_t stalled_run_ = 0;
    bool guard_fired_ = false;
};

// SchedulingPolicy for PD hybrid: a forced phase runs only that phase (kMixed is refused); the
// phase comes from its HybridPhaseSelector, fed this engine's demand (one rank) or the DP group's
// (the DpCoordinator asks decide_phase and forces the answer).
class PdHybridPolicy final : public SchedulingPolicy {
public:
    explicit PdHybridPolicy(int32_t max_consecutive_prefill_steps = kDefaultMaxConsecutivePrefillSteps)
        : selector_(max_consecutive_prefill_steps) {}

    const char* name() const override { return "pd_hybrid"; }
    StepPlan plan(std::optional<Phase> forced) const override;
    bool separates_phases() const override { return true; }
    PhaseDecision decide_phase(PhaseDemand demand) override {
        const Phase phase = selector_.next(demand.can_prefill, demand.has_decode);
        return {.phase = phase, .guard_fired = selector_.guard_fired()};
    }
    void restart_phase_decisions() override {
        selector_ = HybridPhaseSelector(selector_.max_consecutive_prefill_steps());
    }

private:
    HybridPhaseSelector selector_;
};

}  // namespace moeserve::engine
