// Scalar reference for moe_experts_int8: per token and chosen expert, quantize x, int32 dots for
// gate and up, SwiGLU in f32, quantize the result, int32 dots for down, weighted sum in slot order.
#include <cmath>
#include <vector>

#include "moeserve/kernels/cpu/moe_experts_int8.h"
#include "moeserve/kernels/cpu/quantize_int8.h"

namespace moeserve::kernels::cpu {
namespace {

float dot_rescaled(const int8_t* q, float sq, const int8_t* w, float sw, int64_t n) {
    int32_t acc = 0;
    for (int64_t p = 0; p < n; ++p) acc += int32_t{q[p]} * int32_t{w[p]};
    return static_cast<float>(acc) * (sq * sw);
}

}  // namespace

void moe_experts_int8_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                          const MoeExpertsInt8& ex, float* out) {
    const int64_t h = ex.hidden, inter = ex.inter;
    std::vector<int8_t> qx(static_cast<size_t>(h)), qa(static_cast<size_t>(inter));
    std::vector<float> act(static_cast<size_t>(inter));
    for (int64_t t = 0; t < num_tokens; ++t) {
        float* ot = out + t * h;
        for (int64_t i = 0; i < h; ++i) ot[i] = 0.0f;
        float sx = 0.0f, sa = 0.0f;
        quantize_rows_int8_ref(x + t * h, h, 1, h, qx.data(), h, &sx);
        for (int j = 0; j < k; ++j) {
            const int64_t e = int64_t{topk_ids[t * k + j]} - ex.expert_begin;
            if (e < 0 || e >= ex.num_experts) continue;
            const int8_t* gu = ex.gate_up + e * 2 * inter * h;
            const float* gus = ex.gate_up_scale + e * 2 * inter;
            for (int64_t r = 0; r < inter; ++r) {
                const float g = dot_rescaled(qx.data(), sx, gu + r * h, gus[r], h);
                const float u = dot_rescaled(qx.data(), sx, gu + (inter + r) * h, gus[inter + r], h);
                act[size_t(r)] = g / (1.0f + std::exp(-g)) * u;
            }
            quantize_rows_int8_ref(act.data(), inter, 1, inter, qa.data(), inter, &sa);
            const float w = topk_weights[t * k + j];
            for (int64_t i = 0; i < h; ++i) {
                ot[i] +=
                    w * dot_rescaled(qa.data(), sa, ex.down + (e * h + i) * inter, ex.down_scale[e * h + i], inter);
            }
        }
    }
}

}  // namespace moeserve::kernels::cpu
