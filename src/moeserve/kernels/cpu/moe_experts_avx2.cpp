// Grouped MoE experts: counting-sort the (token, slot) assignments by local expert, gather each
// expert's tokens into one block, then run per-expert matmuls as (expert, row-block) work items
// pulled dynamically by all threads (both threads stream weights even for one decode token):
//   A: gate|up rows [r0, r1) of expert e on its tokens, fused with silu(gate) * up (or the glu's
//      unit) -> act
//   B: down rows [h0, h1) of expert e on act -> down_out
//   C: out[t] = sum_j weight[t, j] * down_out[pos(t, j)], in slot order (deterministic).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "moeserve/kernels/cpu/bf16_panels.h"
#include "moeserve/kernels/cpu/matmul_tile.h"
#include "moeserve/kernels/cpu/moe_experts.h"
#include "moeserve/kernels/cpu/moe_grouping.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

using detail::kHiddenBlock;
using detail::kInterBlock;

// Runs item(tid, index, pack) for index in [0, num_items), handed out dynamically; each thread
// packs into its own slice of `packs` (grown here, on the calling thread, when need_pack).
template <typename F>
void run_items(ThreadPool& pool, int64_t num_items, bool need_pack, std::vector<float>& packs, F&& item) {
    const int64_t per_thread = need_pack ? detail::matmul_pack_floats() : 0;
    if (need_pack) packs.resize(size_t(per_thread * pool.num_threads()));
    std::atomic<int64_t> next{0};
    pool.run([&](int tid) {
        float* pack = need_pack ? packs.data() + tid * per_thread : nullptr;
        for (int64_t i = next.fetch_add(1); i < num_items; i = next.fetch_add(1)) item(tid, i, pack);
    });
}

// Rows [0, total) of x [total, k] rounded into xb (matmul_tile.h round_rows_bf16), in parallel.
void round_rows_parallel(ThreadPool& pool, const float* x, int64_t total, int64_t k, std::vector<uint16_t>& xb) {
    const int64_t kp = detail::rounded_row_stride(k);
    xb.resize(size_t(total * kp));
    pool.parallel_for(total, [&](int64_t r0, int64_t r1) {
        detail::round_rows_bf16(x + r0 * k, k, r1 - r0, k, xb.data() + r0 * kp);
    });
}

// The rows [off, off + cnt) of x [*, k] through one tile: from their rounded copy xb when the tile
// rounds them (rounded once per call, not once per tile).
template <typename W>
void expert_tile(const float* x, const std::vector<uint16_t>& xb, int64_t off, int64_t cnt, int64_t k, const W* w,
                 int64_t n, float* out, int64_t ldo, float* pack) {
    if constexpr (std::is_same_v<W, uint16_t>) {
        if (detail::matmul_rounds_x(cnt)) {
            detail::matmul_tile_rounded(xb.data() + off * detail::rounded_row_stride(k), cnt, k, w, n, out, ldo, pack);
            return;
        }
    }
    detail::matmul_tile(x + off * k, k, cnt, k, w, n, out, ldo, pack);
}

// Whether the experts' weights are repacked into bf16 panels (only bf16 ones can be).
bool repacked(const MoeExpertsBf16& ex) { return ex.panels; }
bool repacked(const MoeExpertsF32&) { return false; }

// The experts' three matrices: gate and up [inter, hidden], down [hidden, inter].
enum class ExpertMatrix { kGate, kUp, kDown };

// Rows [r0, r0 + rb) of expert e's `which` on rows [off, off + cnt) of x [*, k] (k: its columns)
// into out (row stride ldo): the weight's panels from r0 / 32 when repacked (the phases' row
// blocks are whole panels then), else its stored rows through expert_tile.
template <typename Ex>
void expert_rows(const Ex& ex, ExpertMatrix which, int64_t e, const float* x, const std::vector<uint16_t>& xb,
                 int64_t off, int64_t cnt, int64_t r0, int64_t rb, float* out, int64_t ldo, float* pack) {
    const int64_t h = ex.hidden, inter = ex.inter;
    const int64_t k = which == ExpertMatrix::kDown ? inter : h;
    if constexpr (std::is_same_v<Ex, MoeExpertsBf16>) {
        if (ex.panels) {
            const int64_t gate_elems = int64_t(bf16_panel_bytes(inter, h) / 2);
            const uint16_t* panels = which == ExpertMatrix::kDown
                                         ? ex.down + e * int64_t(bf16_panel_bytes(h, inter) / 2)
                                         : ex.gate_up + (2 * e + (which == ExpertMatrix::kUp ? 1 : 0)) * gate_elems;
            detail::bf16_panels_tile(x + off * k, k, cnt, k, panels, r0 / kBf16PanelRows, bf16_panel_count(r0 + rb),
                                     r0 + rb, out, ldo);
            return;
        }
    }
    const auto* w = which == ExpertMatrix::kDown
                        ? ex.down + (e * h + r0) * inter
                        : ex.gate_up + (e * 2 * inter + (which == ExpertMatrix::kUp ? inter : 0) + r0) * h;
    expert_tile(x, xb, off, cnt, k, w, rb, out, ldo, pack);
}

// Ex: MoeExpertsBf16 or MoeExpertsF32; matmul_tile has an overload per weight type.
template <typename Ex>
void moe_experts_impl(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const Ex& ex, MoeScratch& s, float* out) {
    const int64_t num_e = ex.num_experts, h = ex.hidden, inter = ex.inter;
    // 1. Counting sort of the slots by local expert. offsets [num_e + 1], then the active experts.
    const detail::MoeGroups groups = detail::group_slots_by_expert(topk_ids, num_tokens, k, ex.expert_begin, num_e, s);
    const int64_t num_active = groups.num_active, total = groups.total;
    const int32_t* active = s.offsets.data() + num_e + 1;
    s.gathered.resize(size_t(total * h));
    s.gate_up.resize(size_t(total * 2 * inter));
    s.act.resize(size_t(total * inter));
    s.down_out.resize(size_t(total * h));
    const bool gemv_only = groups.max_count <= detail::kGemvMaxRows;
    const bool panels = repacked(ex);
    const bool need_pack = !gemv_only && !panels;
    const bool round_rows =
        std::is_same_v<decltype(ex.gate_up), const uint16_t*> && !panels && detail::matmul_rounds_x(groups.max_count);
    const int64_t multiple =
        panels ? kBf16PanelRows : detail::kItemRowMultiple;  // item rows: whole panels when repacked

    // 2. Gather the tokens of each expert into contiguous rows.
    for (int64_t pos = 0; pos < total; ++pos) {
        std::memcpy(s.gathered.data() + pos * h, x + int64_t{s.token_index[size_t(pos)]} * h, size_t(h) * 4);
    }

    if (round_rows) round_rows_parallel(pool, s.gathered.data(), total, h, s.gathered_bf16);

    // 3. Phase A: gate|up + SwiGLU, items (active expert, inter block).
    const int64_t a_rows = detail::phase_rows(inter, num_active, pool.num_threads(), gemv_only, kInterBlock, multiple);
    const int64_t a_blocks = (inter + a_rows - 1) / a_rows;
    run_items(pool, num_active * a_blocks, need_pack, s.pack, [&](int, int64_t item, float* pack) {
        const int64_t e = active[item / a_blocks];
        const int64_t r0 = (item % a_blocks) * a_rows, rb = std::min(a_rows, inter - r0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        float* g = s.gate_up.data() + off * 2 * inter;
        expert_rows(ex, ExpertMatrix::kGate, e, s.gathered.data(), s.gathered_bf16, off, cnt, r0, rb, g + r0, 2 * inter,
                    pack);
        expert_rows(ex, ExpertMatrix::kUp, e, s.gathered.data(), s.gathered_bf16, off, cnt, r0, rb, g + inter + r0,
                    2 * inter, pack);
        for (int64_t i = 0; i < cnt; ++i) {
            detail::glu_span(ex.glu, e, inter, r0, g + i * 2 * inter + r0, g + i * 2 * inter + inter + r0, rb,
                             s.act.data() + (off + i) * inter + r0);
        }
    });

    if (round_rows) round_rows_parallel(pool, s.act.data(), total, inter, s.act_bf16);

    // 4. Phase B: down projection, items (active expert, hidden block).
    const int64_t b_rows = detail::phase_rows(h, num_active, pool.num_threads(), gemv_only, kHiddenBlock, multiple);
    const int64_t b_blocks = (h + b_rows - 1) / b_rows;
    run_items(pool, num_active * b_blocks, need_pack, s.pack, [&](int, int64_t item, float* pack) {
        const int64_t e = active[item / b_blocks];
        const int64_t h0 = (item % b_blocks) * b_rows, hb = std::min(b_rows, h - h0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        expert_rows(ex, ExpertMatrix::kDown, e, s.act.data(), s.act_bf16, off, cnt, h0, hb,
                    s.down_out.data() + off * h + h0, h, pack);
    });

    // 5. Weighted sum per token, in slot order.
    detail::combine_expert_outputs(pool, s, topk_weights, num_tokens, k, h, out);
}

}  // namespace

void moe_experts_bf16(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsBf16& ex, MoeScratch& s, float* out) {
    moe_experts_impl(pool, x, num_tokens, topk_ids, topk_weights, k, ex, s, out);
}

void moe_experts_f32(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                     const float* topk_weights, int k, const MoeExpertsF32& ex, MoeScratch& s, float* out) {
    moe_experts_impl(pool, x, num_tokens, topk_ids, topk_weights, k, ex, s, out);
}

}  // namespace moeserve::kernels::cpu
