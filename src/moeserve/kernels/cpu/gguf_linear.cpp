#include "moeserve/kernels/cpu/gguf_linear.h"

#include <algorithm>
#include <cmath>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_dequant.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/cpu/linear.h"
#include "moeserve/kernels/cpu/moe_grouping.h"

namespace moeserve::kernels::cpu {

namespace {

size_t gguf_row_bytes(GgmlType type, int64_t n) {
    const GgmlTypeTraits t = ggml_traits(type);
    return static_cast<size_t>(n / t.block_size) * t.type_size;
}

float dot_f32(const float* a, const float* b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

// x f32 [rows, n] -> the rows the tiles take: each row quantized to gguf_dot_activation_type
// into qx, and where the tiles take their rows prepared (tiles.prepared_row_bytes != 0) prepared
// from there into `prepared`. row_bytes is set to the stride of the returned rows. A prefill's
// rows (thousands: the experts' slots, every projection's tokens) are split over the pool; a
// decode step's few stay on the calling thread, where they take less time than waking the pool.
const uint8_t* quantized_tile_rows(ThreadPool& pool, const GgufTiles& tiles, GgmlType weight, const float* x,
                                   int64_t rows, int64_t n, std::vector<uint8_t>& qx, std::vector<uint8_t>& prepared,
                                   size_t& row_bytes) {
    const GgmlType act = gguf_dot_activation_type(weight);
    const size_t qrow = gguf_row_bytes(act, n);
    const int64_t nb = n / ggml_traits(weight).block_size;
    qx.resize(qrow * static_cast<size_t>(rows));
    row_bytes = tiles.prepared_row_bytes(nb);
    const bool prepare = row_bytes != 0;
    if (prepare) prepared.resize(row_bytes * static_cast<size_t>(rows));
    constexpr int64_t kElementsPerThread = 16384;  // 3-5 us of quantizing (BM_GgufQuantizeActivations)
    pool.parallel_for(
        rows,
        [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                uint8_t* q = qx.data() + qrow * static_cast<size_t>(r);
                quantize_gguf_activations(act, x + r * n, q, n);
                if (prepare) tiles.prepare(q, nb, prepared.data() + row_bytes * static_cast<size_t>(r));
            }
        },
        std::max<int64_t>(1, kElementsPerThread / n));
    if (!prepare) row_bytes = qrow;
    return prepare ? prepared.data() : qx.data();
}

}  // namespace

void gguf_linear(ThreadPool& pool, const float* x, int64_t rows, const GgufMatrix& w, float* out,
                 GgufScratch& scratch) {
    const int64_t n = w.rows;
    const int64_t k = w.cols;
    if (rows <= 0 || n <= 0) return;
    const int threads = pool.num_threads();
    int64_t chunk = (n + threads - 1) / threads;
    if (gguf_dot_supported(w.type)) {
        // 1. activations -> q8_0 / q8_K rows (llama.cpp's pairing); 2. integer dot per block
        const GgufTiles tiles(w.type, w.packed_rows);
        const int64_t nb = k / ggml_traits(w.type).block_size;
        const int step = tiles.row_step();
        chunk = (chunk + step - 1) / step * step;  // a packed group is never split between threads
        size_t arow = 0;
        const uint8_t* qx = quantized_tile_rows(pool, tiles, w.type, x, rows, k, scratch.qx, scratch.prepared, arow);
        const bool widen = tiles.widens() && rows > kGgufTileCols;  // converted once for every token row
        pool.run([&](int tid) {
            const int64_t begin = tid * chunk;
            const int64_t end = std::min(n, begin + chunk);
            const uint8_t* acts[kGgufTileCols];
            float* slab = widen ? tiles.widen_buffer(kGgufTileRows * k) : nullptr;
            // `step` weight rows stay in L1 while every token row passes them
            for (int64_t j = begin; j < end; j += step) {
                const int nr = static_cast<int>(std::min<int64_t>(step, end - j));
                if (widen) tiles.widen(nb, nr, w.row(j), w.row_stride, slab);
                for (int64_t r0 = 0; r0 < rows; r0 += kGgufTileCols) {
                    const int nc = static_cast<int>(std::min<int64_t>(kGgufTileCols, rows - r0));
                    for (int c = 0; c < nc; ++c) acts[c] = qx + arow * static_cast<size_t>(r0 + c);
                    if (widen) {
                        tiles.run_widened(nb, nr, nc, slab, k, acts, out + r0 * n + j, n);
                    } else {
                        tiles.run(nb, nr, nc, w.rows_from(j), w.row_stride, acts, out + r0 * n + j, n);
                    }
                }
            }
        });
        return;
    }
    // BF16 / F32 rows stored one after another (a whole matrix, not a column slice) are what the
    // float linears read: their blocked GEMV / GEMM, not a row dequantized at a time (BF16 expert
    // tensors come here; a BF16 GGUF file decoded at ~1 tok/s on the row path).
    if (w.type == GgmlType::kBF16 && w.row_stride == static_cast<size_t>(k) * 2) {
        linear_bf16(pool, x, rows, k, reinterpret_cast<const uint16_t*>(w.data), n, out);
        return;
    }
    if (w.type == GgmlType::kF32 && w.row_stride == static_cast<size_t>(k) * 4) {
        linear_f32(pool, x, rows, k, reinterpret_cast<const float*>(w.data), n, out);
        return;
    }
    MOESERVE_CHECK(w.packed_rows == 1, "{} has no packed kernel", ggml_type_name(w.type));
    // no dot kernel: one dequantized weight row per thread at a time
    scratch.wrow.resize(static_cast<size_t>(threads * k));
    float* wrow_all = scratch.wrow.data();
    pool.run([&](int tid) {
        float* wrow = wrow_all + tid * k;
        const int64_t begin = tid * chunk;
        const int64_t end = std::min(n, begin + chunk);
        for (int64_t j = begin; j < end; ++j) {
            dequantize_gguf(w.type, w.row(j), wrow, k);
            for (int64_t r = 0; r < rows; ++r) out[r * n + j] = dot_f32(x + r * k, wrow, k);
        }
    });
}

void gguf_embedding(const GgufMatrix& table, const int32_t* ids, int64_t n, float* out) {
    MOESERVE_CHECK(table.packed_rows == 1, "a packed embedding table");
    for (int64_t i = 0; i < n; ++i) {
        MOESERVE_CHECK(ids[i] >= 0 && ids[i] < table.rows, "token id {} outside the embedding's {} rows", ids[i],
                       table.rows);
        dequantize_gguf(table.type, table.row(ids[i]), out + i * table.cols, table.cols);
    }
}

namespace {

// The slots (token, weight) of each local expert, expert-major: expert e's are
// [offsets[e], offsets[e + 1]) of scratch.tokens / scratch.token_weights.
void group_by_expert(const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens, int k,
                     const GgufExperts& experts, GgufScratch& scratch) {
    const int64_t ne = experts.num_experts();
    scratch.tokens.clear();
    scratch.token_weights.clear();
    scratch.offsets.assign(static_cast<size_t>(ne + 1), 0);
    for (int64_t e = 0; e < ne; ++e) {
        const auto id = static_cast<int32_t>(experts.expert_begin + e);
        for (int64_t t = 0; t < num_tokens; ++t) {
            for (int j = 0; j < k; ++j) {
                if (topk_ids[t * k + j] != id) continue;
                scratch.tokens.push_back(static_cast<int32_t>(t));
                scratch.token_weights.push_back(topk_weights[t * k + j]);
            }
        }
        scratch.offsets[static_cast<size_t>(e + 1)] = static_cast<int64_t>(scratch.tokens.size());
    }
}

// True when every expert's gate and up share one dot-product type and layout (stored or packed)
// and every down another: the fused path below quantizes each activation row once for all of
// them, and runs one GgufTiles per stage.
bool fused_types(const GgufExperts& experts) {
    if (experts.num_experts() == 0) return false;
    const GgufMatrix& gu = experts.gate[0];
    const GgufMatrix& dn = experts.down[0];
    if (!gguf_dot_supported(gu.type) || !gguf_dot_supported(dn.type)) return false;
    const auto same = [](const GgufMatrix& a, const GgufMatrix& b) {
        return a.type == b.type && a.packed_rows == b.packed_rows;
    };
    for (int64_t e = 0; e < experts.num_experts(); ++e) {
        const auto i = static_cast<size_t>(e);
        if (!same(experts.gate[i], gu) || !same(experts.up[i], gu) || !same(experts.down[i], dn)) return false;
    }
    return true;
}

// Calls fn(e, j, nr, s0, nc, acts) for every tile of the active experts: nr (<= step) of an
// expert's out_rows weight rows from j, times nc (<= kGgufTileCols) of its slots from s0, acts
// their activation rows (slot_row(s) gives slot s's). One pool work item per (active expert,
// step rows), each a pass over the expert's slots in order on one thread.
template <class SlotRow, class Fn>
void expert_tiles(ThreadPool& pool, const GgufScratch& scratch, int64_t out_rows, int step, SlotRow slot_row, Fn fn) {
    const int64_t row_blocks = (out_rows + step - 1) / step;
    const std::vector<int32_t>& active = scratch.active;
    detail::run_item_ranges(pool, static_cast<int64_t>(active.size()) * row_blocks, [&](int64_t begin, int64_t end) {
        const uint8_t* acts[kGgufTileCols];
        for (int64_t i = begin; i < end; ++i) {
            const auto e = static_cast<size_t>(active[static_cast<size_t>(i / row_blocks)]);
            const int64_t j = (i % row_blocks) * step;
            const int nr = static_cast<int>(std::min<int64_t>(step, out_rows - j));
            for (int64_t s0 = scratch.offsets[e]; s0 < scratch.offsets[e + 1]; s0 += kGgufTileCols) {
                const int nc = static_cast<int>(std::min<int64_t>(kGgufTileCols, scratch.offsets[e + 1] - s0));
                for (int c = 0; c < nc; ++c) acts[c] = slot_row(s0 + c);
                fn(e, j, nr, s0, nc, acts);
            }
        }
    });
}

// One tile of expert e's matrix m (expert_tiles' fn arguments). An expert with more than one tile
// of slots has its rows widened once, by its first tile (expert_tiles walks the slots in order on
// one thread), into part `part` of the thread's widened rows (gate and up are live together).
void expert_tile(const GgufTiles& tiles, int64_t nb, const GgufMatrix& m, const GgufScratch& scratch, size_t e,
                 int64_t j, int nr, int64_t s0, int nc, const uint8_t* const* acts, float* out, int64_t ldo, int part) {
    const bool widen = tiles.widens() && scratch.offsets[e + 1] - scratch.offsets[e] > kGgufTileCols;
    if (!widen) {
        tiles.run(nb, nr, nc, m.rows_from(j), m.row_stride, acts, out, ldo);
        return;
    }
    float* slab = tiles.widen_buffer(2 * kGgufTileRows * m.cols) + part * kGgufTileRows * m.cols;
    if (s0 == scratch.offsets[e]) tiles.widen(nb, nr, m.row(j), m.row_stride, slab);
    tiles.run_widened(nb, nr, nc, slab, m.cols, acts, out, ldo);
}

// silu(gate x) * up x of every slot into scratch.gate [slots, inter], from the token rows x
// [num_tokens, hidden], each quantized once (not once per expert and projection).
void gate_up_stage(ThreadPool& pool, const GgufExperts& experts, const float* x, int64_t num_tokens,
                   GgufScratch& scratch) {
    const int64_t inter = experts.inter;
    const GgmlType type = experts.gate[0].type;
    const GgufTiles tiles(type, experts.gate[0].packed_rows);
    const int64_t nb = experts.hidden / ggml_traits(type).block_size;
    const int step = tiles.row_step();
    size_t arow = 0;
    const uint8_t* rows =
        quantized_tile_rows(pool, tiles, type, x, num_tokens, experts.hidden, scratch.qx, scratch.prepared, arow);
    const auto token_row = [&](int64_t s) {
        return rows + arow * static_cast<size_t>(scratch.tokens[static_cast<size_t>(s)]);
    };
    expert_tiles(pool, scratch, inter, step, token_row,
                 [&](size_t e, int64_t j, int nr, int64_t s0, int nc, const uint8_t* const* acts) {
                     float g[kGgufTileCols * kGgufPackRows];
                     float u[kGgufTileCols * kGgufPackRows];
                     expert_tile(tiles, nb, experts.gate[e], scratch, e, j, nr, s0, nc, acts, g, step, 0);
                     expert_tile(tiles, nb, experts.up[e], scratch, e, j, nr, s0, nc, acts, u, step, 1);
                     for (int c = 0; c < nc; ++c) {
                         float* dst = scratch.gate.data() + (s0 + c) * inter + j;
                         for (int r = 0; r < nr; ++r) {
                             const float gv = g[c * step + r];
                             const float uv = u[c * step + r];
                             dst[r] = experts.glu.apply(static_cast<int64_t>(e), inter, j + r, gv, uv);
                         }
                     }
                 });
}

// down of every slot into scratch.down [slots, hidden], from the slots' rows of scratch.gate.
void down_stage(ThreadPool& pool, const GgufExperts& experts, GgufScratch& scratch) {
    const int64_t h = experts.hidden;
    const GgmlType type = experts.down[0].type;
    const GgufTiles tiles(type, experts.down[0].packed_rows);
    const int64_t nb = experts.inter / ggml_traits(type).block_size;
    size_t arow = 0;
    const auto slots = static_cast<int64_t>(scratch.tokens.size());
    const uint8_t* rows = quantized_tile_rows(pool, tiles, type, scratch.gate.data(), slots, experts.inter, scratch.qh,
                                              scratch.prepared, arow);
    const auto slot_row = [&](int64_t s) { return rows + arow * static_cast<size_t>(s); };
    expert_tiles(pool, scratch, h, tiles.row_step(), slot_row,
                 [&](size_t e, int64_t c0, int nr, int64_t s0, int nc, const uint8_t* const* acts) {
                     expert_tile(tiles, nb, experts.down[e], scratch, e, c0, nr, s0, nc, acts,
                                 scratch.down.data() + s0 * h + c0, h, 0);
                 });
}

// Experts whose types all have dot kernels: the token rows are quantized once (not once per expert
// and projection), and gate+up, then down, each run as one pass over the (expert, weight rows)
// tiles of the active experts, so a decode step makes two pool dispatches per layer instead of
// three per expert. Every output element is the same gguf_vec_dot as on the per-expert path (a
// tile has its pairs' bits), and out[t] sums its experts in the same order, so the result has
// that path's bits.
void moe_experts_fused(ThreadPool& pool, const float* x, int64_t num_tokens, const GgufExperts& experts,
                       GgufScratch& scratch, float* out) {
    const int64_t h = experts.hidden;
    const int64_t inter = experts.inter;
    const auto slots = static_cast<int64_t>(scratch.tokens.size());
    std::vector<int32_t>& active = scratch.active;  // local ids of experts with tokens
    active.clear();
    for (int64_t e = 0; e < experts.num_experts(); ++e) {
        if (scratch.offsets[static_cast<size_t>(e + 1)] > scratch.offsets[static_cast<size_t>(e)]) {
            active.push_back(static_cast<int32_t>(e));
        }
    }
    // 1. silu(gate x) * up x for each slot: [slots, inter]
    scratch.gate.resize(static_cast<size_t>(slots * inter));
    gate_up_stage(pool, experts, x, num_tokens, scratch);
    // 2. down for each slot: [slots, h]
    scratch.down.resize(static_cast<size_t>(slots * h));
    down_stage(pool, experts, scratch);
    // 3. out[t] += w * down, slots in expert order; threads own column ranges
    pool.parallel_for(h, [&](int64_t c0, int64_t c1) {
        for (int64_t s = 0; s < slots; ++s) {
            float* o = out + scratch.tokens[static_cast<size_t>(s)] * h;
            const float wt = scratch.token_weights[static_cast<size_t>(s)];
            const float* d = scratch.down.data() + s * h;
            for (int64_t c = c0; c < c1; ++c) o[c] += wt * d[c];
        }
    });
}

// Any other types (a dequantized row at a time inside gguf_linear): one expert after another.
void moe_experts_per_expert(ThreadPool& pool, const float* x, const GgufExperts& experts, GgufScratch& scratch,
                            float* out) {
    const int64_t h = experts.hidden;
    const int64_t inter = experts.inter;
    for (int64_t e = 0; e < experts.num_experts(); ++e) {
        const int64_t begin = scratch.offsets[static_cast<size_t>(e)];
        const int64_t m = scratch.offsets[static_cast<size_t>(e + 1)] - begin;
        if (m == 0) continue;
        scratch.gathered.resize(static_cast<size_t>(m * h));
        for (int64_t i = 0; i < m; ++i) {
            std::copy_n(x + scratch.tokens[static_cast<size_t>(begin + i)] * h, h, scratch.gathered.data() + i * h);
        }
        // gate, up -> silu(gate) * up -> down (gguf_linear touches only scratch.qx and scratch.wrow)
        scratch.gate.resize(static_cast<size_t>(m * inter));
        scratch.up.resize(static_cast<size_t>(m * inter));
        scratch.down.resize(static_cast<size_t>(m * h));
        const float* rows_in = scratch.gathered.data();
        gguf_linear(pool, rows_in, m, experts.gate[static_cast<size_t>(e)], scratch.gate.data(), scratch);
        gguf_linear(pool, rows_in, m, experts.up[static_cast<size_t>(e)], scratch.up.data(), scratch);
        for (int64_t i = 0; i < m * inter; ++i) {
            const float g = scratch.gate[static_cast<size_t>(i)], u = scratch.up[static_cast<size_t>(i)];
            scratch.gate[static_cast<size_t>(i)] = experts.glu.apply(e, inter, i % inter, g, u);
        }
        gguf_linear(pool, scratch.gate.data(), m, experts.down[static_cast<size_t>(e)], scratch.down.data(), scratch);
        for (int64_t i = 0; i < m; ++i) {
            float* o = out + scratch.tokens[static_cast<size_t>(begin + i)] * h;
            const float wt = scratch.token_weights[static_cast<size_t>(begin + i)];
            const float* d = scratch.down.data() + i * h;
            for (int64_t c = 0; c < h; ++c) o[c] += wt * d[c];
        }
    }
}

}  // namespace

void gguf_moe_experts(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const GgufExperts& experts, GgufScratch& scratch, float* out) {
    std::fill(out, out + num_tokens * experts.hidden, 0.0f);
    group_by_expert(topk_ids, topk_weights, num_tokens, k, experts, scratch);
    if (fused_types(experts)) {
        moe_experts_fused(pool, x, num_tokens, experts, scratch, out);
    } else {
        moe_experts_per_expert(pool, x, experts, scratch, out);
    }
}

}  // namespace moeserve::kernels::cpu
