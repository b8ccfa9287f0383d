// grouped_topk: per token, scores and group masks in double, then k rounds of "largest remaining,
// lowest id on ties" (E <= 256 and k <= 8 in the supported models, so O(k E) is fine).
#include "moeserve/kernels/cpu/routing_grouped.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "moeserve/core/error.h"

namespace moeserve::kernels::cpu {
namespace {
// Index of the largest value among those not taken; lowest index on ties.
int64_t take_max(const std::vector<double>& v, std::vector<char>& taken) {
    int64_t best = -1;
    for (size_t i = 0; i < v.size(); ++i) {
        if (!taken[i] && (best < 0 || v[i] > v[size_t(best)])) best = static_cast<int64_t>(i);
    }
    taken[size_t(best)] = 1;
    return best;
}
}  // namespace

void grouped_topk(const float* logits, int64_t num_tokens, const GroupedTopkArgs& a, int32_t* topk_ids,
                  float* topk_weights, GroupedTopkScratch& scratch) {
    const int64_t e_count = a.num_experts;
    MOESERVE_CHECK(a.k >= 1 && a.k <= e_count, "grouped_topk: k={} num_experts={}", a.k, e_count);
    const bool grouped = a.group_score != GroupScore::kNone;
    MOESERVE_CHECK(
        !grouped || (a.n_group >= 1 && e_count % a.n_group == 0 && a.topk_group >= 1 && a.topk_group <= a.n_group),
        "grouped_topk: num_experts={} n_group={} topk_group={}", e_count, a.n_group, a.topk_group);
    const int64_t per_group = grouped ? e_count / a.n_group : e_count;
    MOESERVE_CHECK(a.group_score != GroupScore::kTop2Sum || per_group >= 2, "grouped_topk: top-2 of {} per group",
                   per_group);
    const auto n_e = static_cast<size_t>(e_count);
    const auto n_g = static_cast<size_t>(grouped ? a.n_group : 0);
    scratch.scores.resize(n_e);
    scratch.choice.resize(n_e);
    scratch.taken.resize(n_e);
    scratch.group.resize(n_g);
    scratch.group_taken.resize(n_g);
    scratch.keep.resize(n_g);
    auto& [scores, choice, group, taken, group_taken, keep] = scratch;
    for (int64_t t = 0; t < num_tokens; ++t) {
        const float* l = logits + t * e_count;
        if (a.scoring == RouterScoring::kSigmoid) {
            for (int64_t e = 0; e < e_count; ++e) scores[size_t(e)] = 1.0 / (1.0 + std::exp(-double(l[e])));
        } else {
            double mx = -INFINITY, sum = 0.0;
            for (int64_t e = 0; e < e_count; ++e) mx = std::max(mx, double(l[e]));
            for (int64_t e = 0; e < e_count; ++e) sum += scores[size_t(e)] = std::exp(double(l[e]) - mx);
            for (auto& s : scores) s /= sum;
        }
        for (int64_t e = 0; e < e_count; ++e)
            choice[size_t(e)] = scores[size_t(e)] + (a.bias ? double(a.bias[e]) : 0.0);
        if (grouped) {
            for (int64_t g = 0; g < a.n_group; ++g) {
                const double* c = choice.data() + g * per_group;
                double first = -INFINITY, second = -INFINITY;
                for (int64_t i = 0; i < per_group; ++i) {
                    if (c[i] > first) {
                        second = first;
                        first = c[i];
                    } else if (c[i] > second) {
                        second = c[i];
                    }
                }
                group[size_t(g)] = a.group_score == GroupScore::kTop2Sum ? first + second : first;
            }
            std::fill(group_taken.begin(), group_taken.end(), 0);
            std::fill(keep.begin(), keep.end(), 0);
            for (int64_t j = 0; j < a.topk_group; ++j) keep[size_t(take_max(group, group_taken))] = 1;
            for (int64_t e = 0; e < e_count; ++e) {
                if (!keep[size_t(e / per_group)]) choice[size_t(e)] = 0.0;
            }
        }
        std::fill(taken.begin(), taken.end(), 0);
        int32_t* ids = topk_ids + t * a.k;
        double w[64];
        MOESERVE_CHECK(a.k <= 64, "grouped_topk: k={} > 64", a.k);
        double sum = 0.0;
        for (int j = 0; j < a.k; ++j) {
            const int64_t e = take_max(choice, taken);
            ids[j] = static_cast<int32_t>(e);
            w[j] = scores[size_t(e)];
            sum += w[j];
        }
        for (int j = 0; j < a.k; ++j) {
            double v = a.renormalize ? w[j] / (sum + 1e-20) : w[j];
            topk_weights[t * a.k + j] = static_cast<float>(v * a.scale);
        }
    }
}

}  // namespace moeserve::kernels::cpu
