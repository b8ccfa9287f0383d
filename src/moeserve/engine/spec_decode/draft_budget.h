// DraftBudget: how many tokens each sequence may draft in the next decode step, from what drafts
// have cost and earned so far (speculative decoding's rule for the CPU cost; docs/serving.md,
// "Speculative decoding").
//
// A decode step of n computed tokens (one per sequence plus its drafts) is measured to take
//   t(n) = a + b * n       (a: per step, b: per token; a least-squares fit over recent steps)
// and a draft at position j is accepted with probability P_j = alpha_1 * ... * alpha_j, where
// alpha_j is the measured rate at which position j is accepted when every draft before it was.
// With B sequences drafting k tokens each, a step emits B * (1 + P_1 + ... + P_k) tokens in
// a + b * B * (1 + k) seconds; the budget is the k in [0, max] with the most tokens per second.
// On a CPU MoE each drafted token routes to experts of its own, so b can be a large share of a
// step and drafting can lose: then the budget is 0 and only probes draft.
//
// Until enough has been measured (kWarmupSteps decode steps, and first drafts tried kMinTries
// times) the budget is the maximum; a deeper position tried fewer times is taken to accept as
// the one before it (optimistic: drafting there is what measures it). The kWarmupSteps-th step
// and then every kProbeInterval-th one are probes, alternately drafting none and the maximum, so
// the fit sees two step sizes and every position's rate stays current.
// Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

namespace moeserve::engine {

class DraftBudget {
public:
    static constexpr int64_t kWarmupSteps = 8;
    static constexpr int64_t kProbeInterval = 32;
    static constexpr double kMinTries = 4;
    // Weight of a measurement after m more: (1 - 1/kMemory)^m.
    static constexpr double kMemory = 64;

    // adaptive false: the budget is always max_drafts.
    DraftBudget(int32_t max_drafts, bool adaptive);

    // The budget of the next decode step with `num_decodes` sequences in it.
    int32_t next(int64_t num_decodes);
    // A step that computed only decodes ran `num_tokens` tokens (drafts included) in `seconds`.
    void record_step(int64_t num_tokens, double seconds);
    // A sequence drafted `drafted` tokens; the first `accepted` of them were accepted.
    void record_drafts(int32_t drafted, int32_t accepted);

    // The last budget next() returned, and the measured model (for the stats and the tests).
    int32_t current() const { return current_; }
    // Whether the next step may draft: its budget will be > 0 unless the measurements change
    // (a draft head skips its lm_head otherwise).
    bool may_draft_next() const { return !adaptive_ || best_ > 0 || chosen_ + 1 >= kProbeInterval; }
    struct Fit {
        bool valid = false;
        double per_step = 0, per_token = 0;  // a, b in seconds
    };
    Fit fit() const;
    // alpha_j for j = 1 .. max_drafts (0 where position j was never tried).
    std::vector<double> acceptance() const;

private:
    // The budget the measurements favour (max_drafts_ while they are too few).
    int32_t best(int64_t num_decodes) const;

    int32_t max_drafts_;
    bool adaptive_;
    int32_t current_;
    int32_t best_;                                    // the last choice of best(), probes aside
    int64_t decode_steps_ = 0;                        // decode steps recorded
    int64_t chosen_ = kProbeInterval - kWarmupSteps;  // next() calls since the last probe (the first: warm-up)
    bool probe_full_ = true;                          // the last probe drafted the maximum (so the first drafts none)
    // Decayed sums of the step fit: weights, n, n^2, t, n*t.
    double s0_ = 0, sn_ = 0, snn_ = 0, st_ = 0, snt_ = 0;
    // Per position j (index j - 1): decayed times it was tried (every earlier draft accepted) and
    // accepted.
    std::vector<double> tried_, accepted_;
};

}  // namespace moeserve::engine
