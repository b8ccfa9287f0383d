// PD-hybrid phase choice with its starvation guard, and the one-phase step plans.
#include "moeserve/engine/scheduler/policy_pd_hybrid.h"

#include "moeserve/core/error.h"

namespace moeserve::engine {

HybridPhaseSelector::HybridPhaseSelector(int32_t max_consecutive_prefill_steps)
    : bound_(max_consecutive_prefill_steps) {
    if (bound_ < 0) {
        raise(ErrorCode::kInvalidArgument, "--max-consecutive-prefill-steps must be >= 0 (0 = unbounded); got {}",
              bound_);
    }
}

Phase HybridPhaseSelector::next(bool can_prefill, bool has_decode) {
    guard_fired_ = false;
    if (can_prefill && has_decode && bound_ > 0 && stalled_run_ >= bound_) {
        guard_fired_ = true;
        stalled_run_ = 0;
        return Phase::kDecode;
    }
    if (can_prefill) {
        stalled_run_ = has_decode ? stalled_run_ + 1 : 0;
        return Phase::kPrefill;
    }
    stalled_run_ = 0;
    return has_decode ? Phase::kDecode : Phase::kIdle;
}

StepPlan PdHybridPolicy::plan(std::optional<Phase> forced) const {
    MOESERVE_CHECK(forced.has_value(), "pd_hybrid: a step without a phase (decide_phase was not asked)");
    switch (*forced) {
        case Phase::kPrefill:
            return StepPlan{.run_decodes = false, .run_prefills = true, .admit_waiting = true};
        case Phase::kDecode:
            return StepPlan{.run_decodes = true, .run_prefills = false, .admit_waiting = false};
        case Phase::kIdle:
            return StepPlan{.run_decodes = false, .run_prefills = false, .admit_waiting = false};
        case Phase::kMixed:
            break;
    }
    MOESERVE_CHECK(false, "pd_hybrid never mixes prefill and decode in one step");
    return StepPlan{};
}

}  // namespace moeserve::engine
