// Grouped W8A8 MoE experts, the structure of moe_experts_avx2.cpp with int8 tiles:
//   0: counting sort of (token, slot) by local expert; quantize each token once (per token scale)
//      into the grouped order
//   A: items (expert, 64 rows of gate and of up) -> SwiGLU in f32 -> act
//   A': quantize each act row (one scale per (token, expert))
//   B: items (expert, 128 rows of down) -> down_out
//   C: out[t] = sum_j weight[t, j] * down_out[pos(t, j)], in slot order (deterministic).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/matmul_tile.h"
#include "moeserve/kernels/cpu/moe_experts_int8.h"
#include "moeserve/kernels/cpu/quantize_int8.h"
#include "moeserve/kernels/cpu/moe_grouping.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

using detail::kHiddenBlock;
using detail::kInterBlock;
using detail::run_items;

}  // namespace

void moe_experts_int8(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsInt8& ex, MoeScratch& s, MoeInt8Scratch& q,
                      float* out) {
    const int64_t num_e = ex.num_experts, h = ex.hidden, inter = ex.inter;
    const int64_t ldh = int8_padded_cols(h), ldi = int8_padded_cols(inter);
    // 1. Counting sort of the slots by local expert: offsets [num_e + 1], then the active experts.
    const detail::MoeGroups groups = detail::group_slots_by_expert(topk_ids, num_tokens, k, ex.expert_begin, num_e, s);
    const int64_t num_active = groups.num_active, total = groups.total;
    const int32_t* active = s.offsets.data() + num_e + 1;
    s.gate_up.resize(size_t(total * 2 * inter));
    s.act.resize(size_t(total * inter));
    s.down_out.resize(size_t(total * h));
    q.qx.resize(size_t(num_tokens * ldh));
    q.sx.resize(size_t(num_tokens));
    q.qact.resize(size_t(total * ldi));

    // 2. Quantize every token once (not once per chosen expert), gather the int8 rows.
    auto quant_tokens = [&](int64_t t0, int64_t t1) {
        quantize_rows_int8(x + t0 * h, h, t1 - t0, h, q.qx.data() + t0 * ldh, ldh, q.sx.data() + t0);
    };
    if (num_tokens >= 16 && pool.num_threads() > 1) {
        pool.parallel_for(num_tokens, quant_tokens);
    } else {
        quant_tokens(0, num_tokens);
    }
    s.gathered.resize(size_t((total * ldh + 3) / 4));  // int8 [total, ldh] in the f32 buffer
    auto* gathered = reinterpret_cast<int8_t*>(s.gathered.data());
    q.sact.resize(size_t(2 * total));  // [0, total): act scales; [total, 2 total): gathered token scales
    float* pos_sx = q.sact.data() + total;
    for (int64_t pos = 0; pos < total; ++pos) {
        const int64_t t = s.token_index[size_t(pos)];
        std::memcpy(gathered + pos * ldh, q.qx.data() + t * ldh, size_t(ldh));
        pos_sx[pos] = q.sx[size_t(t)];
    }

    // 3. Phase A: gate|up + SwiGLU, items (active expert, inter block).
    const bool decode_sized = groups.max_count <= detail::kGemvMaxRows;  // every expert at GEMV size
    const int64_t a_rows = detail::phase_rows(inter, num_active, pool.num_threads(), decode_sized, kInterBlock);
    const int64_t a_blocks = (inter + a_rows - 1) / a_rows;
    run_items(pool, num_active * a_blocks, [&](int64_t item) {
        const int64_t e = active[item / a_blocks];
        const int64_t r0 = (item % a_blocks) * a_rows, rb = std::min(a_rows, inter - r0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        const int8_t* gu = ex.gate_up + e * 2 * inter * h;
        const float* gus = ex.gate_up_scale + e * 2 * inter;
        const int8_t* xs = gathered + off * ldh;
        float* g = s.gate_up.data() + off * 2 * inter;
        detail::matmul_tile_int8(xs, ldh, pos_sx + off, cnt, h, gu + r0 * h, gus + r0, rb, g + r0, 2 * inter);
        detail::matmul_tile_int8(xs, ldh, pos_sx + off, cnt, h, gu + (inter + r0) * h, gus + inter + r0, rb,
                                 g + inter + r0, 2 * inter);
        for (int64_t i = 0; i < cnt; ++i) {
            detail::silu_mul_span(g + i * 2 * inter + r0, g + i * 2 * inter + inter + r0, rb,
                                  s.act.data() + (off + i) * inter + r0);
        }
    });

    // 4. Quantize each SwiGLU row (per token and expert).
    auto quant_act = [&](int64_t p0, int64_t p1) {
        quantize_rows_int8(s.act.data() + p0 * inter, inter, p1 - p0, inter, q.qact.data() + p0 * ldi, ldi,
                           q.sact.data() + p0);
    };
    if (total >= 16 && pool.num_threads() > 1) {
        pool.parallel_for(total, quant_act);
    } else {
        quant_act(0, total);
    }

    // 5. Phase B: down projection, items (active expert, hidden block).
    const int64_t b_rows = detail::phase_rows(h, num_active, pool.num_threads(), decode_sized, kHiddenBlock);
    const int64_t b_blocks = (h + b_rows - 1) / b_rows;
    run_items(pool, num_active * b_blocks, [&](int64_t item) {
        const int64_t e = active[item / b_blocks];
        const int64_t h0 = (item % b_blocks) * b_rows, hb = std::min(b_rows, h - h0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        detail::matmul_tile_int8(q.qact.data() + off * ldi, ldi, q.sact.data() + off, cnt, inter,
                                 ex.down + (e * h + h0) * inter, ex.down_scale + e * h + h0, hb,
                                 s.down_out.data() + off * h + h0, h);
    });

    // 6. Weighted sum per token, in slot order.
    detail::combine_expert_outputs(pool, s, topk_weights, num_tokens, k, h, out);
}

}  // namespace moeserve::kernels::cpu
