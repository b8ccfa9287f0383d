// Grouped W4A16 / W4A8 MoE experts, the structure of moe_experts_avx2.cpp with int4 tiles (the ISA
// is picked inside detail::matmul_tile_int4 / matmul_tile_w4a8; W4A8 quantizes each phase's input
// rows once, before its items):
//   A: items (expert, 64 rows of gate and of up) -> SwiGLU in f32 -> act
//   B: items (expert, 128 rows of down) -> down_out
//   C: out[t] = sum_j weight[t, j] * down_out[pos(t, j)], in slot order (deterministic).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "moeserve/kernels/cpu/linear_w4a8.h"
#include "moeserve/kernels/cpu/matmul_tile.h"
#include "moeserve/kernels/cpu/moe_experts_int4.h"
#include "moeserve/kernels/cpu/moe_grouping.h"

namespace moeserve::kernels::cpu {
namespace {

using detail::kHiddenBlock;
using detail::kInterBlock;
using detail::run_items;

// Rows [offsets[e], offsets[e + 1]) of rows [total, width] put in expert e's column order
// perm[e * width + i] (GPTQ act order), for every active expert e.
void permute_rows(const MoeScratch& s, const int32_t* active, int64_t num_active, const int32_t* perm, int64_t width,
                  float* rows) {
    std::vector<float> tmp(static_cast<size_t>(width));
    for (int64_t a = 0; a < num_active; ++a) {
        const int64_t e = active[a];
        const int32_t* p = perm + e * width;
        for (int64_t pos = s.offsets[size_t(e)]; pos < s.offsets[size_t(e + 1)]; ++pos) {
            float* row = rows + pos * width;
            for (int64_t i = 0; i < width; ++i) tmp[size_t(i)] = row[p[i]];
            std::memcpy(row, tmp.data(), size_t(width) * 4);
        }
    }
}

// One phase's input rows for the int4 tiles: f32 (W4A16), or quantized once for every item (W4A8).
class TileInput {
public:
    TileInput(ThreadPool& pool, const float* rows, int64_t width, int64_t total, const Int4Weights& w,
              W4a8Buffer& buffer)
        : rows_(rows), width_(width) {
        if (w.int8_activations) {
            quantized_ = quantize_w4a8_rows(rows, width, total, width, w.group_size, buffer, &pool);
        }
    }
    // Rows [off, off + count) against w into out (row stride ldo).
    void run(int64_t off, int64_t count, const Int4Weights& w, float* out, int64_t ldo) const {
        if (w.int8_activations) {
            detail::matmul_tile_w4a8(quantized_.from(off), count, w, out, ldo);
        } else {
            detail::matmul_tile_int4(rows_ + off * width_, width_, count, w, out, ldo);
        }
    }

private:
    const float* rows_;
    int64_t width_;
    W4a8Rows quantized_{};
};

}  // namespace

void moe_experts_int4(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsInt4& ex, MoeScratch& s, float* out) {
    const int64_t num_e = ex.num_experts, h = ex.hidden, inter = ex.inter;
    const detail::MoeGroups groups = detail::group_slots_by_expert(topk_ids, num_tokens, k, ex.expert_begin, num_e, s);
    const int64_t num_active = groups.num_active, total = groups.total;
    const int32_t* active = s.offsets.data() + num_e + 1;
    s.gathered.resize(size_t(total * h));
    s.gate_up.resize(size_t(total * 2 * inter));
    s.act.resize(size_t(total * inter));
    s.down_out.resize(size_t(total * h));
    for (int64_t pos = 0; pos < total; ++pos) {
        std::memcpy(s.gathered.data() + pos * h, x + int64_t{s.token_index[size_t(pos)]} * h, size_t(h) * 4);
    }
    if (ex.gate_up_perm != nullptr) permute_rows(s, active, num_active, ex.gate_up_perm, h, s.gathered.data());
    // the calling thread's (the pool fills its rows, the items read them); phase A's rows are dead when
    // phase B's are quantized
    thread_local W4a8Buffer quantized;
    const TileInput gate_up_in(pool, s.gathered.data(), h, total, ex.gate_up, quantized);

    // Phase A: gate|up + SwiGLU, items (active expert, inter block).
    const bool decode_sized = groups.max_count <= detail::kGemvMaxRows;  // every expert at GEMV size
    const int64_t a_rows = detail::phase_rows(inter, num_active, pool.num_threads(), decode_sized, kInterBlock);
    const int64_t a_blocks = (inter + a_rows - 1) / a_rows;
    run_items(pool, num_active * a_blocks, [&](int64_t item) {
        const int64_t e = active[item / a_blocks];
        const int64_t r0 = (item % a_blocks) * a_rows, rb = std::min(a_rows, inter - r0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        float* g = s.gate_up.data() + off * 2 * inter;
        gate_up_in.run(off, cnt, ex.gate_up.rows(e * 2 * inter + r0, rb), g + r0, 2 * inter);
        gate_up_in.run(off, cnt, ex.gate_up.rows(e * 2 * inter + inter + r0, rb), g + inter + r0, 2 * inter);
        for (int64_t i = 0; i < cnt; ++i) {
            detail::silu_mul_span(g + i * 2 * inter + r0, g + i * 2 * inter + inter + r0, rb,
                                  s.act.data() + (off + i) * inter + r0);
        }
    });

    if (ex.down_perm != nullptr) permute_rows(s, active, num_active, ex.down_perm, inter, s.act.data());
    const TileInput down_in(pool, s.act.data(), inter, total, ex.down, quantized);

    // Phase B: down projection, items (active expert, hidden block).
    const int64_t b_rows = detail::phase_rows(h, num_active, pool.num_threads(), decode_sized, kHiddenBlock);
    const int64_t b_blocks = (h + b_rows - 1) / b_rows;
    run_items(pool, num_active * b_blocks, [&](int64_t item) {
        const int64_t e = active[item / b_blocks];
        const int64_t h0 = (item % b_blocks) * b_rows, hb = std::min(b_rows, h - h0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        down_in.run(off, cnt, ex.down.rows(e * h + h0, hb), s.down_out.data() + off * h + h0, h);
    });

    detail::combine_expert_outputs(pool, s, topk_weights, num_tokens, k, h, out);
}

void moe_experts_int4_ref(const float* x, int64_t num_tokens, const int32_t* topk_ids, const float* topk_weights, int k,
                          const MoeExpertsInt4& ex, float* out) {
    const int64_t h = ex.hidden, inter = ex.inter;
    std::vector<float> gu(static_cast<size_t>(2 * inter)), act(static_cast<size_t>(inter)), d(static_cast<size_t>(h));
    std::vector<float> xp(static_cast<size_t>(h)), ap(static_cast<size_t>(inter));
    for (int64_t t = 0; t < num_tokens; ++t) {
        float* ot = out + t * h;
        std::fill(ot, ot + h, 0.0f);
        for (int j = 0; j < k; ++j) {
            const int64_t e = int64_t{topk_ids[t * k + j]} - ex.expert_begin;
            if (e < 0 || e >= ex.num_experts) continue;
            const float* xe = x + t * h;
            if (ex.gate_up_perm != nullptr) {
                for (int64_t i = 0; i < h; ++i) xp[size_t(i)] = xe[ex.gate_up_perm[e * h + i]];
                xe = xp.data();
            }
            linear_int4_ref(xe, 1, ex.gate_up.rows(e * 2 * inter, 2 * inter), gu.data());
            for (int64_t r = 0; r < inter; ++r) {
                const float g = gu[size_t(r)];
                act[size_t(r)] = g / (1.0f + std::exp(-g)) * gu[size_t(inter + r)];
            }
            const float* ae = act.data();
            if (ex.down_perm != nullptr) {
                for (int64_t i = 0; i < inter; ++i) ap[size_t(i)] = act[size_t(ex.down_perm[e * inter + i])];
                ae = ap.data();
            }
            linear_int4_ref(ae, 1, ex.down.rows(e * h, h), d.data());
            const float w = topk_weights[t * k + j];
            for (int64_t i = 0; i < h; ++i) ot[i] += w * d[size_t(i)];
        }
    }
}

}  // namespace moeserve::kernels::cpu
