// Scalar references for moe_experts_bf16 / _f32: token by token, expert by expert, no grouping.
#include <cmath>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/bf16_panels.h"
#include "moeserve/kernels/cpu/moe_experts.h"

namespace moeserve::kernels::cpu {

namespace {

float widen(uint16_t w) { return bf16_to_f32(w); }
float widen(float w) { return w; }

template <typename Ex>
void moe_experts_ref_impl(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                          const Ex& ex, float* out) {
    const int64_t h = ex.hidden, inter = ex.inter;
    std::vector<float> act(static_cast<size_t>(inter));
    for (int64_t t = 0; t < num_tokens; ++t) {
        const float* xt = x + t * h;
        float* ot = out + t * h;
        for (int64_t i = 0; i < h; ++i) ot[i] = 0.0f;
        for (int j = 0; j < k; ++j) {
            const int64_t e = int64_t{topk_ids[t * k + j]} - ex.expert_begin;
            if (e < 0 || e >= ex.num_experts) continue;
            const auto* gu = ex.gate_up + e * 2 * inter * h;
            const auto* down = ex.down + e * h * inter;
            for (int64_t r = 0; r < inter; ++r) {
                double g = 0, u = 0;
                for (int64_t p = 0; p < h; ++p) {
                    g += double(xt[p]) * double(widen(gu[r * h + p]));
                    u += double(xt[p]) * double(widen(gu[(inter + r) * h + p]));
                }
                act[size_t(r)] = ex.glu.is_swiglu() ? float(g / (1.0 + std::exp(-g)) * u)
                                                    : ex.glu.apply(e, inter, r, float(g), float(u));
            }
            const float w = topk_weights[t * k + j];
            for (int64_t i = 0; i < h; ++i) {
                double d = 0;
                for (int64_t r = 0; r < inter; ++r) d += double(act[size_t(r)]) * double(widen(down[i * inter + r]));
                ot[i] += w * float(d);
            }
        }
    }
}

}  // namespace

void moe_experts_bf16_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                          const MoeExpertsBf16& ex, float* out) {
    if (!ex.panels) {
        moe_experts_ref_impl(x, num_tokens, topk_ids, topk_weights, k, ex, out);
        return;
    }
    // Repacked weights: the stored rows back first.
    const int64_t h = ex.hidden, inter = ex.inter, n = ex.num_experts;
    const int64_t gate_elems = int64_t(bf16_panel_bytes(inter, h) / 2),
                  down_elems = int64_t(bf16_panel_bytes(h, inter) / 2);
    std::vector<uint16_t> gate_up(size_t(n * 2 * inter * h)), down(size_t(n * h * inter));
    for (int64_t e = 0; e < n; ++e) {
        for (int64_t half = 0; half < 2; ++half) {
            unpack_bf16_panels(ex.gate_up + (2 * e + half) * gate_elems, inter, h,
                               gate_up.data() + (2 * e + half) * inter * h);
        }
        unpack_bf16_panels(ex.down + e * down_elems, h, inter, down.data() + e * h * inter);
    }
    MoeExpertsBf16 rows = ex;
    rows.gate_up = gate_up.data();
    rows.down = down.data();
    rows.panels = false;
    moe_experts_ref_impl(x, num_tokens, topk_ids, topk_weights, k, rows, out);
}

void moe_experts_f32_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                         const MoeExpertsF32& ex, float* out) {
    moe_experts_ref_impl(x, num_tokens, topk_ids, topk_weights, k, ex, out);
}

}  // namespace moeserve::kernels::cpu
