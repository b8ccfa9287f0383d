// StepPhase: what kind of work one engine step runs. The one vocabulary of the scheduler's
// policies (engine/scheduler/policy.h), the engine's step outcome and the DP vote and agreement
// (parallel/dp_control.h). It lives in core because both engine and parallel use it and parallel
// must not include engine (docs/architecture.md, "Layering").
#pragma once

namespace moeserve {

// kIdle: nothing runs (no forward, or a dummy one under lock-step); kPrefill: prompt (or
// recompute) tokens only; kDecode: one token per running request; kMixed: decodes and prefill
// chunks together. The numeric values travel in the DP vote (DpVote::forced_phase): like the
// vote's layout they only match between ranks of the same build.
enum class StepPhase { kIdle = 0, kPrefill = 1, kDecode = 2, kMixed = 3 };

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
