// softmax_topk: f32 softmax over all experts, then k rounds of "largest remaining, lowest id on
// ties" (k <= 8 and E <= 256 in the supported models, so O(k E) beats a heap), then renormalize.
#include <cmath>
#include <limits>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/routing.h"

namespace moeserve::kernels::cpu {

void softmax_topk(const float* logits, int64_t num_tokens, int64_t num_experts, int k, bool renormalize,
                  int32_t* topk_ids, float* topk_weights) {
    MOESERVE_CHECK(k >= 1 && k <= num_experts, "softmax_topk: k={} num_experts={}", k, num_experts);
    std::vector<float> probs(static_cast<size_t>(num_experts));
    std::vector<char> taken(static_cast<size_t>(num_experts));
    for (int64_t t = 0; t < num_tokens; ++t) {
        const float* l = logits + t * num_experts;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t e = 0; e < num_experts; ++e) mx = std::max(mx, l[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < num_experts; ++e) {
            probs[size_t(e)] = std::exp(l[e] - mx);
            sum += probs[size_t(e)];
        }
        const float inv = 1.0f / sum;
        for (auto& p : probs) p *= inv;
        std::fill(taken.begin(), taken.end(), 0);
        int32_t* ids = topk_ids + t * k;
        float* w = topk_weights + t * k;
        float picked_sum = 0.0f;
        for (int j = 0; j < k; ++j) {
            int64_t best = -1;
            for (int64_t e = 0; e < num_experts; ++e) {
                if (!taken[size_t(e)] && (best < 0 || probs[size_t(e)] > probs[size_t(best)])) best = e;
            }
            taken[size_t(best)] = 1;
            ids[j] = static_cast<int32_t>(best);
            w[j] = probs[size_t(best)];
            picked_sum += w[j];
        }
        if (renormalize) {
            for (int j = 0; j < k; ++j) w[j] /= picked_sum;
        }
    }
}

}  // namespace moeserve::kernels::cpu
