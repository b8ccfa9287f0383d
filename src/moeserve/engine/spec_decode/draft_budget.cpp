#include "moeserve/engine/spec_decode/draft_budget.h"

#include <algorithm>

namespace moeserve::engine {

namespace {

constexpr double kDecay = 1.0 - 1.0 / DraftBudget::kMemory;

}  // namespace

DraftBudget::DraftBudget(int32_t max_drafts, bool adaptive)
    : max_drafts_(max_drafts),
      adaptive_(adaptive),
      current_(max_drafts),
      best_(max_drafts),
      tried_(static_cast<size_t>(std::max(max_drafts, 0)), 0.0),
      accepted_(static_cast<size_t>(std::max(max_drafts, 0)), 0.0) {}

void DraftBudget::record_step(int64_t num_tokens, double seconds) {
    const auto n = static_cast<double>(num_tokens);
    s0_ = s0_ * kDecay + 1;
    sn_ = sn_ * kDecay + n;
    snn_ = snn_ * kDecay + n * n;
    st_ = st_ * kDecay + seconds;
    snt_ = snt_ * kDecay + n * seconds;
    ++decode_steps_;
}

void DraftBudget::record_drafts(int32_t drafted, int32_t accepted) {
    for (size_t j = 0; j < tried_.size(); ++j) {
        tried_[j] *= kDecay;
        accepted_[j] *= kDecay;
    }
    // Position j + 1 was tried when the j drafts before it were accepted.
    const int32_t tried = std::min({drafted, accepted + 1, max_drafts_});
    for (int32_t j = 0; j < tried; ++j) {
        tried_[static_cast<size_t>(j)] += 1;
        if (j < accepted) accepted_[static_cast<size_t>(j)] += 1;
    }
}

DraftBudget::Fit DraftBudget::fit() const {
    Fit f;
    // The slope needs two step sizes: n's decayed variance, relative to its mean.
    const double det = s0_ * snn_ - sn_ * sn_;
    if (decode_steps_ < kWarmupSteps || s0_ <= 0 || det <= 1e-3 * sn_ * sn_) return f;
    f.per_token = std::max(0.0, (s0_ * snt_ - sn_ * st_) / det);
    f.per_step = std::max(0.0, (st_ - f.per_token * sn_) / s0_);
    f.valid = f.per_step + f.per_token > 0;
    return f;
}

std::vector<double> DraftBudget::acceptance() const {
    std::vector<double> alpha(tried_.size(), 0.0);
    for (size_t j = 0; j < tried_.size(); ++j) alpha[j] = tried_[j] > 0 ? accepted_[j] / tried_[j] : 0.0;
    return alpha;
}

int32_t DraftBudget::best(int64_t num_decodes) const {
    const Fit f = fit();
    if (!f.valid || tried_[0] < kMinTries) return max_drafts_;  // warm-up
    const std::vector<double> alpha = acceptance();
    const auto b = static_cast<double>(std::max<int64_t>(num_decodes, 1));
    int32_t best_k = 0;
    double reached = 1;   // P_k: every draft up to position k accepted
    double expected = 1;  // tokens per sequence: 1 + P_1 + ... + P_k
    double best_rate = b / (f.per_step + f.per_token * b);
    double rate_here = alpha[0];
    for (int32_t k = 1; k <= max_drafts_; ++k) {
        // A position tried too rarely to measure is taken to accept as the one before it: drafting
        // there is what measures it (a rate assumed low would never be corrected).
        if (tried_[static_cast<size_t>(k - 1)] >= kMinTries) rate_here = alpha[static_cast<size_t>(k - 1)];
        reached *= rate_here;
        expected += reached;
        const double rate = b * expected / (f.per_step + f.per_token * b * (1 + k));
        if (rate > best_rate) {
            best_rate = rate;
            best_k = k;
        }
    }
    return best_k;
}

int32_t DraftBudget::next(int64_t num_decodes) {
    if (!adaptive_ || max_drafts_ <= 0) return current_ = max_drafts_;
    const int32_t k = best_ = best(num_decodes);
    if (++chosen_ >= kProbeInterval) {  // probes, every other one drafting fully: both step sizes, every position
        chosen_ = 0;
        probe_full_ = !probe_full_;
        return current_ = probe_full_ ? max_drafts_ : 0;
    }
    return current_ = k;
}

}  // namespace moeserve::engine
