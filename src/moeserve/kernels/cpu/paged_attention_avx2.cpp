// AVX2 paged attention: work items are (sequence, kv head, chunk of query tokens) handed out
// dynamically; each walks its queries in groups of 4 that read the same kv head (the GQA heads of
// a token, then consecutive tokens) and, per group, tiles of kTile keys with an online softmax
// (running max m, sum l, accumulator rescaled by exp(m_old - m_new)); the group shares each
// tile's K/V loads. Scores of 8 keys come out of one transpose-reduce (hsum8). write_kv copies
// new keys/values into their slots. The cache element T is float, bf16 (uint16_t) or fp8 e4m3
// (simd::E4m3), widened to f32 on load by simd::load8; everything after the load is f32. An fp8
// row's scale (times simd::kE4m3Unit) multiplies the score of its key and, folded into the
// softmax weight, its value row, so the inner loops only widen. This code serves every ISA level
// (the ref level included: attention has no scalar dispatch level); at the avx512 level the
// items go to paged_attention_avx512.cpp instead, and decode-shaped sequences are split by
// segments of keys across the threads (SplitDecode). Sliding windows (gpt-oss, Mistral) and
// attention sinks run in both kernels.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/kernels/cpu/paged_attention.h"
#include "moeserve/kernels/cpu/paged_attention_isa.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

constexpr int64_t kTile = 32;    // keys per tile: K and V rows of a tile (2 x 16 KiB at d=128) stay in L1
constexpr int64_t kQueries = 4;  // queries sharing each key tile (GQA heads and/or positions)
constexpr int64_t kChunk = 16;   // query tokens per work item

template <typename T>
constexpr bool kScaled = std::is_same_v<T, simd::E4m3>;  // rows carry a scale (fp8)

template <typename T>
struct Tile {
    const T* k[kTile];
    const T* v[kTile];
    alignas(32) float p[kQueries][kTile];
    // fp8: per key, the factor its widened K / V row is multiplied by (scale * kE4m3Unit).
    alignas(32) float kf[kTile];
    alignas(32) float vf[kTile];
};

// p[j] = dot(q, k[j]) * scale for j < n.
template <typename T>
void tile_scores(const float* q, int64_t d, const Tile<T>& t, int64_t n, float scale, float* p) {
    int64_t j = 0;
    if (d % 8 == 0) {
        for (; j + 8 <= n; j += 8) {
            __m256 a[8];
            for (int u = 0; u < 8; ++u) a[u] = _mm256_setzero_ps();
            for (int64_t x = 0; x < d; x += 8) {
                const __m256 qv = _mm256_loadu_ps(q + x);
#pragma GCC unroll 8
                for (int u = 0; u < 8; ++u) a[u] = _mm256_fmadd_ps(qv, simd::load8(t.k[j + u] + x), a[u]);
            }
            __m256 s = simd::hsum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
            if constexpr (kScaled<T>) s = _mm256_mul_ps(s, _mm256_load_ps(t.kf + j));
            _mm256_store_ps(p + j, _mm256_mul_ps(s, _mm256_set1_ps(scale)));
        }
    }
    for (; j < n; ++j) {
        __m256 a = _mm256_setzero_ps();
        int64_t x = 0;
        for (; x + 8 <= d; x += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + x), simd::load8(t.k[j] + x), a);
        float s = simd::hsum(a);
        for (; x < d; ++x) s += q[x] * simd::to_f32(t.k[j][x]);
        if constexpr (kScaled<T>) s *= t.kf[j];
        p[j] = s * scale;
    }
}

// acc[qi, :] = acc[qi, :] * alpha[qi] + sum_j p[qi][j] * v[j], for qi < nq; each V row is loaded
// once for all queries.
template <typename T>
void accumulate_pv(const Tile<T>& t, int64_t n, int64_t nq, int64_t d, const float* alpha, float* acc) {
    int64_t x = 0;
    if (nq == kQueries) {
        for (; x + 8 <= d; x += 8) {
            __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + x), _mm256_set1_ps(alpha[0]));
            __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + x), _mm256_set1_ps(alpha[1]));
            __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(acc + 2 * d + x), _mm256_set1_ps(alpha[2]));
            __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(acc + 3 * d + x), _mm256_set1_ps(alpha[3]));
            for (int64_t j = 0; j < n; ++j) {
                const __m256 v = simd::load8(t.v[j] + x);
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&t.p[0][j]), v, a0);
                a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(&t.p[1][j]), v, a1);
                a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(&t.p[2][j]), v, a2);
                a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(&t.p[3][j]), v, a3);
            }
            _mm256_storeu_ps(acc + x, a0);
            _mm256_storeu_ps(acc + d + x, a1);
            _mm256_storeu_ps(acc + 2 * d + x, a2);
            _mm256_storeu_ps(acc + 3 * d + x, a3);
        }
    } else {
        for (; x + 8 <= d; x += 8) {
            for (int64_t qi = 0; qi < nq; ++qi) {
                __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + qi * d + x), _mm256_set1_ps(alpha[qi]));
                for (int64_t j = 0; j < n; ++j) {
                    a = _mm256_fmadd_ps(_mm256_broadcast_ss(&t.p[qi][j]), simd::load8(t.v[j] + x), a);
                }
                _mm256_storeu_ps(acc + qi * d + x, a);
            }
        }
    }
    for (; x < d; ++x) {
        for (int64_t qi = 0; qi < nq; ++qi) {
            float a = acc[qi * d + x] * alpha[qi];
            for (int64_t j = 0; j < n; ++j) a += t.p[qi][j] * simd::to_f32(t.v[j][x]);
            acc[qi * d + x] = a;
        }
    }
}

// A group of up to kQueries queries that read the same kv head of one sequence: the heads of a
// GQA group at one position, and/or consecutive positions. Online-softmax state per query.
struct Group {
    int64_t nq = 0;
    const float* q[kQueries];
    float* out[kQueries];
    float* lse[kQueries];  // null: not asked for
    int64_t pos[kQueries];
    int64_t first[kQueries];  // the first key in the query's window (0 without one)
    float sink[kQueries];     // the head's sink logit, -inf without sinks (adds exp(-inf) = 0)
    float m[kQueries], l[kQueries];
    float* acc;  // [kQueries, d]
};

// Prefetches the K and V rows of keys [j0, j0 + n) of kv head kvh (n <= 0: nothing). The rows of
// one head are sizeof(T) * head_dim bytes every num_kv_heads * sizeof(T) * head_dim, in shuffled
// blocks, which the hardware prefetcher follows poorly.
template <typename T>
void prefetch_tile(const PagedKvLayer& kv, const int32_t* table, int64_t kvh, int64_t j0, int64_t n) {
    constexpr int64_t kLine = 64 / sizeof(T);  // elements per cache line
    const T* k_cache = static_cast<const T*>(kv.k_cache);
    const T* v_cache = static_cast<const T*>(kv.v_cache);
    const int64_t d = kv.head_dim, bs = kv.block_size, row_stride = kv.num_kv_heads * d;
    int64_t blk = j0 / bs, row = j0 % bs;
    for (int64_t j = 0; j < n; ++j) {
        const int64_t off = (int64_t{table[blk]} * bs + row) * row_stride + kvh * d;
        for (int64_t x = 0; x < d; x += kLine) {
            _mm_prefetch(reinterpret_cast<const char*>(k_cache + off + x), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(v_cache + off + x), _MM_HINT_T0);
        }
        if (++row == bs) {
            row = 0;
            ++blk;
        }
    }
}

// One query's softmax step over a tile of n keys from j0 whose scores it may see are
// p[lo, nv): p becomes their weights (0 elsewhere); returns the rescale of its running state.
float softmax_tile_step(Group& g, int64_t qi, float* p, int64_t lo, int64_t nv, int64_t n) {
    float mt = -INFINITY;
    for (int64_t j = lo; j < nv; ++j) mt = std::max(mt, p[j]);
    const float m_new = std::max(g.m[qi], mt);
    const float alpha = std::exp(g.m[qi] - m_new);  // 0 on the first tile (m = -inf)
    float lt = simd::exp_shifted_sum(p, nv, m_new);
    if (lo > 0) {  // keys before the window: weight 0, and not in the sum
        std::fill(p, p + lo, 0.0f);
        lt = 0.0f;
        for (int64_t j = lo; j < nv; ++j) lt += p[j];
    }
    std::fill(p + nv, p + n, 0.0f);  // causal mask inside the tile
    g.l[qi] = g.l[qi] * alpha + lt;
    g.m[qi] = m_new;
    return alpha;
}

// Each query g.q[qi] attends keys [g.first[qi], g.pos[qi]] of kv head kvh; writes g.out[qi].
template <typename T>
void attend_group(const PagedKvLayer& kv, const int32_t* table, int64_t kvh, float scale, Tile<T>& t, Group& g) {
    const int64_t d = kv.head_dim, bs = kv.block_size;
    const T* k_cache = static_cast<const T*>(kv.k_cache);
    const T* v_cache = static_cast<const T*>(kv.v_cache);
    const int64_t nq = g.nq;
    int64_t last = 0, start = g.first[0];
    for (int64_t qi = 0; qi < nq; ++qi) {
        g.m[qi] = -INFINITY;
        g.l[qi] = 0.0f;
        last = std::max(last, g.pos[qi]);
        start = std::min(start, g.first[qi]);
    }
    std::fill(g.acc, g.acc + nq * d, 0.0f);
    for (int64_t j0 = start; j0 <= last; j0 += kTile) {
        const int64_t n = std::min(kTile, last + 1 - j0);
        // Walk block/row incrementally: a division per key cost as much as its dot product.
        int64_t blk = j0 / bs, row = j0 % bs;
        for (int64_t j = 0; j < n; ++j) {
            const int64_t head_row = (int64_t{table[blk]} * bs + row) * kv.num_kv_heads + kvh;
            t.k[j] = k_cache + head_row * d;
            t.v[j] = v_cache + head_row * d;
            if constexpr (kScaled<T>) {
                t.kf[j] = kv.k_scale[head_row] * simd::kE4m3Unit;
                t.vf[j] = kv.v_scale[head_row] * simd::kE4m3Unit;
            }
            if (++row == bs) {
                row = 0;
                ++blk;
            }
        }
        prefetch_tile<T>(kv, table, kvh, j0 + kTile, std::min(kTile, last + 1 - j0 - kTile));
        float alpha[kQueries];
        for (int64_t qi = 0; qi < nq; ++qi) {
            float* p = t.p[qi];
            const int64_t nv = std::min(n, g.pos[qi] + 1 - j0);  // keys this query may see: [lo, nv)
            const int64_t lo = std::max<int64_t>(0, g.first[qi] - j0);
            if (nv <= lo) {  // the tile is past its position or before its window: nothing new
                alpha[qi] = 1.0f;
                std::fill(p, p + n, 0.0f);
                continue;
            }
            tile_scores(g.q[qi], d, t, nv, scale, p);
            alpha[qi] = softmax_tile_step(g, qi, p, lo, nv, n);
            if constexpr (kScaled<T>) {  // each value row's factor, folded into its weight
                for (int64_t j = lo; j < nv; ++j) p[j] *= t.vf[j];
            }
        }
        accumulate_pv(t, n, nq, d, alpha, g.acc);
    }
    for (int64_t qi = 0; qi < nq; ++qi) {
        const float l = g.l[qi] + std::exp(g.sink[qi] - g.m[qi]);  // the sink: in the sum, no value
        const float inv = 1.0f / l;
        for (int64_t x = 0; x < d; ++x) g.out[qi][x] = g.acc[qi * d + x] * inv;
        if (g.lse[qi]) *g.lse[qi] = g.m[qi] + std::log(l);
    }
}

// The AVX-512 kernels (paged_attention_isa.h) take every item when the CPU runs avx512 and the
// head dim suits them.
bool use_flash(const PagedKvLayer& kv) {
    return active_isa() >= Isa::kAvx512 && kv.head_dim % 16 == 0 && kv.head_dim <= 256;
}

detail::FlashKvHead flash_kv_head(const PagedKvLayer& kv, const PagedAttentionArgs& a, const int32_t* table,
                                  int64_t kvh) {
    const int kind = kv.dtype == DType::kBF16 ? 1 : kv.dtype == DType::kF8E4M3 ? 2 : 0;
    return {kv.k_cache,      kv.v_cache,  kv.k_scale, kv.v_scale, kind,    kv.block_size,
            kv.num_kv_heads, kv.head_dim, kvh,        table,      a.scale, a.window};
}

// Calls row(q, out, lse, pos, head) for each query row of tokens [i0, i1) of sequence s that reads
// kv head kvh: token-major, then the heads of its GQA group (a decode token's heads share K/V tiles).
template <typename F>
void for_each_row(const PagedKvLayer& kv, const PagedAttentionArgs& a, int64_t s, int64_t kvh, int64_t i0, int64_t i1,
                  F&& row) {
    const int64_t d = kv.head_dim, group = a.num_heads / kv.num_kv_heads;
    const int64_t q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
    for (int64_t i = i0; i < i1; ++i) {
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
            const int64_t tok = (q0 + i) * a.num_heads + h;
            row(a.q + tok * d, a.out + tok * d, a.lse ? a.lse + tok : nullptr, a.seq_lens[s] - q_len + i, h);
        }
    }
}

// Query tokens [i0, i1) of sequence s through the AVX-512 kernels, kFlashRows rows at a time.
void attend_flash(const PagedKvLayer& kv, const PagedAttentionArgs& a, int64_t s, int64_t kvh, int64_t i0, int64_t i1) {
    const detail::FlashKvHead head = flash_kv_head(kv, a, a.block_tables + s * a.max_blocks_per_seq, kvh);
    detail::FlashRows rows;
    rows.n = 0;
    for_each_row(kv, a, s, kvh, i0, i1, [&](const float* q, float* out, float* lse, int64_t pos, int64_t h) {
        rows.q[rows.n] = q;
        rows.out[rows.n] = out;
        rows.lse[rows.n] = lse;
        rows.pos[rows.n] = pos;
        rows.sink[rows.n] = a.sinks ? a.sinks[h] : -INFINITY;
        if (++rows.n == detail::kFlashRows) {
            detail::flash_attend_avx512(head, rows);
            rows.n = 0;
        }
    });
    if (rows.n > 0) detail::flash_attend_avx512(head, rows);
}

// Query tokens [i0, i1) of sequence s through attend_group, kQueries rows at a time.
template <typename T>
void attend_avx2(const PagedKvLayer& kv, const PagedAttentionArgs& a, int64_t s, int64_t kvh, int64_t i0, int64_t i1,
                 Tile<T>& tile, Group& g) {
    const int32_t* table = a.block_tables + s * a.max_blocks_per_seq;
    g.nq = 0;
    for_each_row(kv, a, s, kvh, i0, i1, [&](const float* q, float* out, float* lse, int64_t pos, int64_t head) {
        g.q[g.nq] = q;
        g.out[g.nq] = out;
        g.lse[g.nq] = lse;
        g.pos[g.nq] = pos;
        g.first[g.nq] = detail::window_start(a.window, pos);
        g.sink[g.nq] = a.sinks ? a.sinks[head] : -INFINITY;
        if (++g.nq == kQueries) {
            attend_group(kv, table, kvh, a.scale, tile, g);
            g.nq = 0;
        }
    });
    if (g.nq > 0) attend_group(kv, table, kvh, a.scale, tile, g);
}

// Split-KV decode at the avx512 level: a decode-shaped sequence (at most kDecodeRows query rows
// per kv head) is cut into segments of kSegmentKeys keys, one work item each over every kv head,
// so the threads share one long sequence's keys. Each item writes its segment's partial result;
// the partials are then merged in key order, as the flash block merges its segments (same bits).
// The plan lists every split sequence's rows once, kv head major (FlashDecodeRows).
struct SplitDecode {
    struct Seq {
        // segments [first_segment, first_segment + segments): those that hold a key of some row's
        // window (all of them without a sliding window)
        int64_t seq, rows, first_row, first_item, first_segment, segments;
        int64_t partials;  // offset (floats) of its running total; its segments' partials follow
    };
    std::vector<Seq> seqs;
    std::vector<bool> split;  // [num_seqs]
    std::vector<const float*> q;
    std::vector<float*> out, lse;
    std::vector<int64_t> pos;
    std::vector<float> sink;  // each row's head's sink logit, -inf without sinks
    int64_t num_items = 0, floats = 0;
};

// A sequence with no query token (nothing to attend) is not: it gets no item either way.
bool decode_shaped(const PagedKvLayer& kv, const PagedAttentionArgs& a, int64_t s) {
    const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
    return q_len > 0 && q_len * (a.num_heads / kv.num_kv_heads) <= detail::kDecodeRows;
}

// One partial of `rows` rows: o [rows][head_dim], m and l [rows].
int64_t partial_floats(int64_t rows, int64_t d) { return rows * (d + 2); }

// A sequence's partials from `base`: index 0 is the running total, 1 + segment the segments.
detail::FlashPartial partial_at(float* base, int64_t rows, int64_t d, int64_t index) {
    float* o = base + index * partial_floats(rows, d);
    return {o, o + rows * d, o + rows * d + rows};
}

// Appends the rows of decode-shaped sequence s, kv head major: q, out, lse and pos.
void add_decode_rows(const PagedKvLayer& kv, const PagedAttentionArgs& a, int64_t s, SplitDecode& plan) {
    const int64_t d = kv.head_dim, group = a.num_heads / kv.num_kv_heads;
    const int64_t q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
    for (int64_t h = 0; h < kv.num_kv_heads; ++h) {
        for (int64_t i = 0; i < q_len; ++i) {
            for (int64_t g = 0; g < group; ++g) {
                const int64_t tok = (q0 + i) * a.num_heads + h * group + g;
                plan.q.push_back(a.q + tok * d);
                plan.out.push_back(a.out + tok * d);
                plan.lse.push_back(a.lse ? a.lse + tok : nullptr);
                plan.pos.push_back(a.seq_lens[s] - q_len + i);
                plan.sink.push_back(a.sinks ? a.sinks[h * group + g] : -INFINITY);
            }
        }
    }
}

SplitDecode plan_split_decode(const PagedKvLayer& kv, const PagedAttentionArgs& a) {
    SplitDecode plan;
    plan.split.assign(size_t(a.num_seqs), false);
    for (int64_t s = 0; s < a.num_seqs; ++s) {
        if (!decode_shaped(kv, a, s)) continue;
        plan.split[size_t(s)] = true;
        const int64_t first_row = int64_t(plan.q.size());
        add_decode_rows(kv, a, s, plan);
        const int64_t rows = int64_t(plan.q.size()) - first_row;
        // The first query token's window starts first.
        const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
        const int64_t first_segment = detail::window_start(a.window, a.seq_lens[s] - q_len) / detail::kSegmentKeys;
        const int64_t segments =
            (int64_t{a.seq_lens[s]} + detail::kSegmentKeys - 1) / detail::kSegmentKeys - first_segment;
        plan.seqs.push_back({s, rows, first_row, plan.num_items, first_segment, segments, plan.floats});
        plan.num_items += segments;
        plan.floats += (1 + segments) * partial_floats(rows, kv.head_dim);
    }
    return plan;
}

// One item of a split decode: the sequence's segment number `index` of those it reads
// (first_segment + index) into its partial.
void run_split_item(const PagedKvLayer& kv, const PagedAttentionArgs& a, const SplitDecode& plan,
                    const SplitDecode::Seq& sq, int64_t index, float* partials) {
    const detail::FlashKvHead head = flash_kv_head(kv, a, a.block_tables + sq.seq * a.max_blocks_per_seq, 0);
    const detail::FlashDecodeRows rows{kv.num_kv_heads, sq.rows / kv.num_kv_heads, plan.q.data() + sq.first_row,
                                       plan.pos.data() + sq.first_row};
    detail::flash_decode_segment_avx512(head, rows, sq.first_segment + index,
                                        partial_at(partials + sq.partials, sq.rows, kv.head_dim, 1 + index));
}

// Each split sequence's segments merged in key order into its total, then divided out.
void merge_split_decode(ThreadPool& pool, const PagedKvLayer& kv, const SplitDecode& plan, float* partials) {
    const int64_t d = kv.head_dim;
    pool.parallel_for(int64_t(plan.seqs.size()), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const SplitDecode::Seq& sq = plan.seqs[size_t(i)];
            float* base = partials + sq.partials;
            const detail::FlashPartial total = partial_at(base, sq.rows, d, 0);
            std::fill(total.o, total.o + sq.rows * d, 0.0f);
            std::fill(total.m, total.m + sq.rows, -INFINITY);
            std::fill(total.l, total.l + sq.rows, 0.0f);
            for (int64_t seg = 0; seg < sq.segments; ++seg) {
                detail::flash_merge_avx512(total, partial_at(base, sq.rows, d, 1 + seg), sq.rows, d);
            }
            detail::flash_finish_avx512(total, sq.rows, d, plan.out.data() + sq.first_row,
                                        plan.lse.data() + sq.first_row, plan.sink.data() + sq.first_row);
        }
    });
}

template <typename T>
void run_paged_attention(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttentionArgs& a) {
    const bool flash = use_flash(kv);
    const int64_t d = kv.head_dim;
    SplitDecode plan = flash ? plan_split_decode(kv, a) : SplitDecode{};
    if (!flash) plan.split.assign(size_t(a.num_seqs), false);
    // Work items: (sequence, kv head, chunk of kChunk query tokens) for the sequences not split,
    // handed out dynamically (later chunks of a prefill see more keys), then the split decode's
    // segments. item_start[s] = first item of sequence s.
    std::vector<int64_t> item_start(static_cast<size_t>(a.num_seqs + 1), 0);
    for (int64_t s = 0; s < a.num_seqs; ++s) {
        const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
        const int64_t items = plan.split[size_t(s)] ? 0 : kv.num_kv_heads * ((q_len + kChunk - 1) / kChunk);
        item_start[size_t(s + 1)] = item_start[size_t(s)] + items;
    }
    const int64_t num_chunk_items = item_start.back(), num_items = num_chunk_items + plan.num_items;
    // The caller's, reused across calls. The workers must use its pointer: in their lambda the
    // name would be their own thread's (empty) copy.
    thread_local std::vector<float> partial_buffer;
    if (partial_buffer.size() < size_t(plan.floats)) partial_buffer.resize(size_t(plan.floats));
    float* const partials = partial_buffer.data();
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        Tile<T> tile;
        std::vector<float> acc(static_cast<size_t>(flash ? 0 : kQueries * d));  // the AVX2 groups' accumulators
        Group g;
        g.acc = acc.data();
        for (int64_t item = next.fetch_add(1); item < num_items; item = next.fetch_add(1)) {
            if (item >= num_chunk_items) {
                const int64_t local = item - num_chunk_items;
                const auto sq =
                    std::upper_bound(plan.seqs.begin(), plan.seqs.end(), local,
                                     [](int64_t v, const SplitDecode::Seq& q) { return v < q.first_item; }) -
                    1;
                run_split_item(kv, a, plan, *sq, local - sq->first_item, partials);
                continue;
            }
            const int64_t s = std::upper_bound(item_start.begin(), item_start.end(), item) - item_start.begin() - 1;
            const int64_t local = item - item_start[size_t(s)];
            const int64_t kvh = local % kv.num_kv_heads, chunk = local / kv.num_kv_heads;
            const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
            const int64_t i0 = chunk * kChunk, i1 = std::min(q_len, (chunk + 1) * kChunk);
            if (flash) {
                attend_flash(kv, a, s, kvh, i0, i1);
            } else {
                attend_avx2(kv, a, s, kvh, i0, i1, tile, g);
            }
        }
    });
    if (!plan.seqs.empty()) merge_split_decode(pool, kv, plan, partials);
}

}  // namespace

int64_t detail::window_start(int64_t window, int64_t pos) { return window > 0 && pos >= window ? pos - window + 1 : 0; }

void write_kv(const PagedKvLayer& kv, const float* k, const float* v, int64_t num_tokens, const int64_t* slot_mapping) {
    const int64_t row = kv.num_kv_heads * kv.head_dim;
    const size_t esize = dtype_size(kv.dtype);
    auto* k_cache = static_cast<std::byte*>(kv.k_cache);
    auto* v_cache = static_cast<std::byte*>(kv.v_cache);
    for (int64_t t = 0; t < num_tokens; ++t) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        MOESERVE_DCHECK(slot < kv.num_blocks * kv.block_size, "write_kv: slot {} out of range", slot);
        if (kv.dtype == DType::kF8E4M3) {  // one scale per kv head's row
            for (int64_t h = 0; h < kv.num_kv_heads; ++h) {
                const int64_t head_row = slot * kv.num_kv_heads + h, src = t * row + h * kv.head_dim;
                kv.k_scale[head_row] = store_f32_row_e4m3(reinterpret_cast<uint8_t*>(k_cache) + head_row * kv.head_dim,
                                                          k + src, kv.head_dim);
                kv.v_scale[head_row] = store_f32_row_e4m3(reinterpret_cast<uint8_t*>(v_cache) + head_row * kv.head_dim,
                                                          v + src, kv.head_dim);
            }
            continue;
        }
        store_f32_row(k_cache + size_t(slot * row) * esize, kv.dtype, k + t * row, row);
        store_f32_row(v_cache + size_t(slot * row) * esize, kv.dtype, v + t * row, row);
    }
}

void paged_attention(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttentionArgs& a) {
    MOESERVE_CHECK(a.num_heads % kv.num_kv_heads == 0, "paged_attention: num_heads={} num_kv_heads={}", a.num_heads,
                   kv.num_kv_heads);
    MOESERVE_CHECK(kv.dtype == DType::kF32 || kv.dtype == DType::kBF16 || kv.dtype == DType::kF8E4M3,
                   "paged_attention: KV cache dtype {}", dtype_name(kv.dtype));
    if (kv.dtype == DType::kF8E4M3) {
        MOESERVE_CHECK(kv.k_scale != nullptr && kv.v_scale != nullptr, "paged_attention: an fp8 cache without scales");
        run_paged_attention<simd::E4m3>(pool, kv, a);
    } else if (kv.dtype == DType::kBF16) {
        run_paged_attention<uint16_t>(pool, kv, a);
    } else {
        run_paged_attention<float>(pool, kv, a);
    }
}

}  // namespace moeserve::kernels::cpu
