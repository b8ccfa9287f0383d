// Grouped MoE experts: counting-sort the (token, slot) assignments by local expert, gather each
// expert's tokens into one block, then run per-expert matmuls as (expert, row-block) work items
// pulled dynamically by all threads (both threads stream weights even for one decode token):
//   A: gate|up rows [r0, r1) of expert e on its tokens, fused with silu(gate) * up -> act
//   B: down rows [h0, h1) of expert e on act -> down_out
//   C: out[t] = sum_j weight[t, j] * down_out[pos(t, j)], in slot order (deterministic).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "moeserve/kernels/cpu/matmul_tile.h"
#include "moeserve/kernels/cpu/moe_experts.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

constexpr int64_t kInterBlock = 64;    // gate/up rows per phase-A item
constexpr int64_t kHiddenBlock = 128;  // down rows per phase-B item

// out[i] = silu(g[i]) * u[i].
void silu_mul_span(const float* g, const float* u, int64_t n, float* out) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, simd::exp8(_mm256_xor_ps(gv, sign))));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// Runs item(tid, index, pack) for index in [0, num_items), handed out dynamically.
template <typename F>
void run_items(ThreadPool& pool, int64_t num_items, bool need_pack, F&& item) {
    std::atomic<int64_t> next{0};
    pool.run([&](int tid) {
        std::vector<float> pack(need_pack ? size_t(detail::matmul_pack_floats()) : 0);
        for (int64_t i = next.fetch_add(1); i < num_items; i = next.fetch_add(1)) item(tid, i, pack.data());
    });
}

}  // namespace

void moe_experts_bf16(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsBf16& ex, MoeScratch& s, float* out) {
    const int64_t num_e = ex.num_experts, h = ex.hidden, inter = ex.inter;
    const int64_t num_slots = num_tokens * k;
    // 1. Counting sort of the slots by local expert. offsets [num_e + 1], then the active experts.
    s.offsets.assign(size_t(2 * num_e + 1), 0);
    s.slot_index.assign(size_t(num_slots), -1);  // slot -> position in the grouped order, or -1
    for (int64_t a = 0; a < num_slots; ++a) {
        const int64_t e = int64_t{topk_ids[a]} - ex.expert_begin;
        if (e >= 0 && e < num_e) s.offsets[size_t(e + 1)]++;
    }
    int64_t num_active = 0, max_count = 0;
    for (int64_t e = 0; e < num_e; ++e) {
        const int32_t c = s.offsets[size_t(e + 1)];
        if (c > 0) s.offsets[size_t(num_e + 1 + num_active++)] = int32_t(e);
        max_count = std::max<int64_t>(max_count, c);
        s.offsets[size_t(e + 1)] += s.offsets[size_t(e)];
    }
    const int64_t total = s.offsets[size_t(num_e)];
    s.token_index.resize(size_t(total));
    {
        std::vector<int32_t>& off = s.offsets;  // use off[e] as a fill cursor, then restore
        for (int64_t a = 0; a < num_slots; ++a) {
            const int64_t e = int64_t{topk_ids[a]} - ex.expert_begin;
            if (e < 0 || e >= num_e) continue;
            const int32_t pos = off[size_t(e)]++;
            s.token_index[size_t(pos)] = int32_t(a / k);
            s.slot_index[size_t(a)] = pos;
        }
        for (int64_t e = num_e; e > 0; --e) off[size_t(e)] = off[size_t(e - 1)];
        off[0] = 0;
    }
    const int32_t* active = s.offsets.data() + num_e + 1;
    s.gathered.resize(size_t(total * h));
    s.gate_up.resize(size_t(total * 2 * inter));
    s.act.resize(size_t(total * inter));
    s.down_out.resize(size_t(total * h));
    const bool need_pack = max_count > detail::kGemvMaxRows;

    // 2. Gather the tokens of each expert into contiguous rows.
    for (int64_t pos = 0; pos < total; ++pos) {
        std::memcpy(s.gathered.data() + pos * h, x + int64_t{s.token_index[size_t(pos)]} * h, size_t(h) * 4);
    }

    // 3. Phase A: gate|up + SwiGLU, items (active expert, inter block).
    const int64_t a_blocks = (inter + kInterBlock - 1) / kInterBlock;
    run_items(pool, num_active * a_blocks, need_pack, [&](int, int64_t item, float* pack) {
        const int64_t e = active[item / a_blocks];
        const int64_t r0 = (item % a_blocks) * kInterBlock, rb = std::min(kInterBlock, inter - r0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        const uint16_t* gu = ex.gate_up + e * 2 * inter * h;
        const float* xs = s.gathered.data() + off * h;
        float* g = s.gate_up.data() + off * 2 * inter;
        detail::matmul_tile(xs, h, cnt, h, gu + r0 * h, rb, g + r0, 2 * inter, pack);
        detail::matmul_tile(xs, h, cnt, h, gu + (inter + r0) * h, rb, g + inter + r0, 2 * inter, pack);
        for (int64_t i = 0; i < cnt; ++i) {
            silu_mul_span(g + i * 2 * inter + r0, g + i * 2 * inter + inter + r0, rb,
                          s.act.data() + (off + i) * inter + r0);
        }
    });

    // 4. Phase B: down projection, items (active expert, hidden block).
    const int64_t b_blocks = (h + kHiddenBlock - 1) / kHiddenBlock;
    run_items(pool, num_active * b_blocks, need_pack, [&](int, int64_t item, float* pack) {
        const int64_t e = active[item / b_blocks];
        const int64_t h0 = (item % b_blocks) * kHiddenBlock, hb = std::min(kHiddenBlock, h - h0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        detail::matmul_tile(s.act.data() + off * inter, inter, cnt, inter, ex.down + (e * h + h0) * inter, hb,
                            s.down_out.data() + off * h + h0, h, pack);
    });

    // 5. Weighted sum per token, in slot order.
    auto combine = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            float* ot = out + t * h;
            std::memset(ot, 0, size_t(h) * 4);
            for (int j = 0; j < k; ++j) {
                const int32_t pos = s.slot_index[size_t(t * k + j)];
                if (pos < 0) continue;
                const __m256 w = _mm256_set1_ps(topk_weights[t * k + j]);
                const float* d = s.down_out.data() + int64_t{pos} * h;
                int64_t i = 0;
                for (; i + 8 <= h; i += 8) {
                    _mm256_storeu_ps(ot + i, _mm256_fmadd_ps(w, _mm256_loadu_ps(d + i), _mm256_loadu_ps(ot + i)));
                }
                for (; i < h; ++i) ot[i] += topk_weights[t * k + j] * d[i];
            }
        }
    };
    if (num_tokens * h < (1 << 14)) {
        combine(0, num_tokens);
    } else {
        pool.parallel_for(num_tokens, combine);
    }
}

}  // namespace moeserve::kernels::cpu
