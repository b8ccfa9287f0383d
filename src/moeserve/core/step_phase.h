// StepPhase: what kind of work one engine step runs. The one vocabulary of the scheduler's
// policies (engine/scheduler/policy.h), the engine's step outcome and the DP vote and agreement
// (parallel/dp_control.h), with PhaseDemand, what the phase is decided from. It lives in core because both engine and
// parallel use it and parallel must not include engine (docs/architecture.md, "Layering").
#pragma once

namespace moeserve {

// kIdle: nothing runs (no forward, or a dummy one under lock-step); kPrefill: prompt (or
// recompute) tokens only; kDecode: one token per running request; kMixed: decodes and prefill
// chunks together.
enum class StepPhase { kIdle = 0, kPrefill = 1, kDecode = 2, kMixed = 3 };

// What an engine could run now: the input of the phase decision (SchedulingPolicy::decide_phase).
// One scheduler's (Scheduler::demand), or under DP the OR over the group's votes (parallel::agree).
struct PhaseDemand {
    // A running request has prompt (or recompute) tokens left, or the head waiting request is
    // admissible now (seats and KV blocks); never just "has waiting requests" (issue #8).
    bool can_prefill = false;
    bool has_decode = false;  // a running request decodes
    bool operator==(const PhaseDemand&) const = default;
};

constexpr const char* step_phase_name(StepPhase phase) {
    switch (phase) {
        case StepPhase::kIdle:
            return "idle";
        case StepPhase::kPrefill:
            return "prefill";
        case StepPhase::kDecode:
            return "decode";
        case StepPhase::kMixed:
            return "mixed";
    }
    return "?";
}

}  // namespace moeserve
