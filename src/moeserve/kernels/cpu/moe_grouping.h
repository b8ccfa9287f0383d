// Internal to the MoE expert kernels (bf16, int8 and int4): the steps they share around their
// per-expert matmuls. Not part of the kernels API.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/cpu/moe_experts.h"

namespace moeserve::kernels::cpu::detail {

// The work split of the grouped kernels: phase A items are (expert, kInterBlock rows of gate and
// of up), phase B items (expert, kHiddenBlock rows of down).
constexpr int64_t kInterBlock = 64;
constexpr int64_t kHiddenBlock = 128;

// Rows per item of a phase over `rows` weight rows per expert: `block` (kInterBlock or
// kHiddenBlock), or, when every expert's tokens take the GEMV (a decode step), as few items as
// still give each thread about four: each item's rows are one sequential read of the weights, and
// fewer, longer reads moved the decode of 8 bf16 experts from 0.62 to 0.67 of the STREAM read
// (moe_bench, Zen5; int8 and int4 alike, docs/performance.md). Whole groups of `multiple` rows
// (kItemRowMultiple; 32 for bf16 weights repacked into 32-row panels, which the blocks already
// are).
inline constexpr int64_t kItemRowMultiple = 16;
inline int64_t phase_rows(int64_t rows, int64_t num_active, int num_threads, bool gemv_only, int64_t block,
                          int64_t multiple = kItemRowMultiple) {
    if (!gemv_only || num_active <= 0) return block;
    const int64_t items_per_expert = (4 * int64_t{num_threads} + num_active - 1) / num_active;
    const int64_t per_item = (rows + items_per_expert - 1) / items_per_expert;
    return per_item <= multiple ? multiple : (per_item + multiple - 1) / multiple * multiple;  // never 0
}

// item(i) for i in [0, num_items), each taken by whichever pool thread is free next (an atomic
// counter: the items differ in cost, as experts have different token counts).
template <typename F>
void run_items(ThreadPool& pool, int64_t num_items, F&& item) {
    if (num_items <= 0) return;
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        for (int64_t i = next.fetch_add(1); i < num_items; i = next.fetch_add(1)) item(i);
    });
}

// fn(begin, end) over items [0, n) in ranges the pool's threads take as they come free, each a
// share of what is left (guided) but at least 1/8 of a thread's even share, so that a decode
// step's few uniform items take few grabs of the shared counter: for many small items of
// different cost (the GGUF experts' row blocks, each over its expert's tokens), where halves
// fixed in advance left one thread waiting on the other in prefill (a 518-token Q4_K_M prefill
// about 6% faster on average, docs/performance.md).
template <typename F>
void run_item_ranges(ThreadPool& pool, int64_t n, F&& fn) {
    if (n <= 0) return;
    const int64_t threads = pool.num_threads(), least = std::max<int64_t>(1, n / (8 * threads));
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        int64_t begin = next.load(std::memory_order_relaxed);
        while (begin < n) {
            const int64_t chunk = std::max(least, (n - begin) / (2 * threads));
            if (next.compare_exchange_weak(begin, begin + chunk, std::memory_order_relaxed)) {
                fn(begin, std::min(n, begin + chunk));
                begin = next.load(std::memory_order_relaxed);
            }
        }
    });
}

struct MoeGroups {
    int64_t num_active = 0;  // experts with at least one token; their ids: s.offsets[num_e + 1 ..]
    int64_t total = 0;       // (token, slot) pairs routed to local experts
    int64_t max_count = 0;   // most tokens of one expert
};

// Counting sort of the num_tokens * k slots by local expert (ids outside [expert_begin,
// expert_begin + num_e) are skipped). Fills s.offsets [num_e + 1] (+ the active expert ids after
// them), s.token_index [total] (grouped position -> token) and s.slot_index [num_tokens * k]
// (slot -> grouped position, or -1).
MoeGroups group_slots_by_expert(const int32_t* topk_ids, int64_t num_tokens, int k, int64_t expert_begin, int64_t num_e,
                                MoeScratch& s);

// out[i] = silu(g[i]) * u[i].
void silu_mul_span(const float* g, const float* u, int64_t n, float* out);
// out[i] = the glu's unit of local expert e's rows r0 + i (of inter): silu_mul_span for SwiGLU.
void glu_span(const ExpertGlu& glu, int64_t e, int64_t inter, int64_t r0, const float* g, const float* u, int64_t n,
              float* out);

// out[t] = sum_j weight[t, j] * s.down_out[s.slot_index[t, j]] (zero where no local expert), in
// slot order so the result is deterministic. out f32 [num_tokens, hidden].
void combine_expert_outputs(ThreadPool& pool, const MoeScratch& s, const float* topk_weights, int64_t num_tokens, int k,
                            int64_t hidden, float* out);

}  // namespace moeserve::kernels::cpu::detail
