#include "moeserve/engine/scheduler/policy_mixed.h"

namespace moeserve::engine {

StepPlan MixedPolicy::plan(std::optional<Phase> forced) const {
    if (!forced || *forced == Phase::kMixed) return StepPlan{};
    switch (*forced) {
        case Phase::kPrefill:
            return StepPlan{.run_decodes = false, .run_prefills = true, .admit_waiting = true};
        case Phase::kDecode:
            return StepPlan{.run_decodes = true, .run_prefills = false, .admit_waiting = false};
        default:
            return StepPlan{.run_decodes = false, .run_prefills = false, .admit_waiting = false};
    }
}

}  // namespace moeserve::engine
