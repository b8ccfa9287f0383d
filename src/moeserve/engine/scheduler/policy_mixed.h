// MixedPolicy: vLLM v1's schedule, no prefill/decode split: every step runs the running
// requests (decodes and prefill chunks) and admits waiting ones within the token budget.
// A forced phase narrows one step to that phase.
#pragma once

#include "moeserve/engine/scheduler/policy.h"

namespace moeserve::engine {

class MixedPolicy final : public SchedulingPolicy {
public:
    const char* name() const override { return "mixed"; }
    StepPlan plan(std::optional<Phase> forced) const override;
};

}  // namespace moeserve::engine
