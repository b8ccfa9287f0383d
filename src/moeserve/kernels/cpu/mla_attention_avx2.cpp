// AVX2 MLA kernels. Attention: work items are (query token, group of kHeads heads), and for a
// token with more than kSegmentKeys keys (query token, group, segment of keys), merged after
// (split-KV); the heads of a group share the token's causal range and every cached row, so each
// tile of kTile rows is loaded once for kHeads dot products and kHeads weighted sums (online
// softmax per head).
// Missing heads of the last group attend with a zero query into a scratch output.
// Absorption: per head (threads split the heads), register-blocked axpy / dot over the rank.
// The cache element T is float, bf16 (uint16_t) or fp8 e4m3 (simd::E4m3), widened by simd::load8;
// f32 arithmetic after the load. An fp8 row's two scales (latent, k_pe; times simd::kE4m3Unit)
// multiply the two halves of its score, and the latent's is folded into the row's softmax weight.
// Attention has no scalar dispatch level: this code serves every ISA level.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/kernels/cpu/mla_attention.h"
#include "moeserve/kernels/cpu/mla_attention_isa.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

constexpr int64_t kTile = 32;  // cached rows per tile
constexpr int kHeads = 8;      // heads sharing each tile

template <typename T>
constexpr bool kScaled = std::is_same_v<T, simd::E4m3>;  // rows carry scales (fp8)

template <typename T>
struct Tile {
    const T* rows[kTile];
    alignas(32) float p[kHeads][kTile];
    // fp8: per row, the factors of its widened latent and k_pe (scale * kE4m3Unit).
    float lf[kTile], rf[kTile];
};

// s[u] = dot(q[u][x0, x1), row[x0, x1)) for the kHeads queries.
template <typename T>
void dot_heads(const float* const* q, const T* row, int64_t x0, int64_t x1, float* s) {
    __m256 a[kHeads];
    for (int u = 0; u < kHeads; ++u) a[u] = _mm256_setzero_ps();
    int64_t x = x0;
    for (; x + 8 <= x1; x += 8) {
        const __m256 r = simd::load8(row + x);
#pragma GCC unroll 8
        for (int u = 0; u < kHeads; ++u) a[u] = _mm256_fmadd_ps(_mm256_loadu_ps(q[u] + x), r, a[u]);
    }
    _mm256_storeu_ps(s, simd::hsum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]));
    for (; x < x1; ++x) {
        for (int u = 0; u < kHeads; ++u) s[u] += q[u][x] * simd::to_f32(row[x]);
    }
}

// p[u][j] = dot(q[u], rows[j]) * scale over dk values (the first rank of them the latent), j < n.
template <typename T>
void tile_scores(const float* const* q, int64_t dk, int64_t rank, Tile<T>& t, int64_t n, float scale) {
    for (int64_t j = 0; j < n; ++j) {
        alignas(32) float s[kHeads];
        if constexpr (kScaled<T>) {  // the latent and k_pe apart, each times its factor
            alignas(32) float sr[kHeads];
            dot_heads(q, t.rows[j], 0, rank, s);
            dot_heads(q, t.rows[j], rank, dk, sr);
            for (int u = 0; u < kHeads; ++u) t.p[u][j] = (s[u] * t.lf[j] + sr[u] * t.rf[j]) * scale;
        } else {
            dot_heads(q, t.rows[j], 0, dk, s);
            for (int u = 0; u < kHeads; ++u) t.p[u][j] = s[u] * scale;
        }
    }
}

// acc[u, :dv] = acc[u, :dv] * alpha[u] + sum_j p[u][j] * rows[j][:dv].
template <typename T>
void accumulate(const Tile<T>& t, int64_t n, int64_t dv, const float* alpha, float* acc) {
    int64_t x = 0;
    for (; x + 8 <= dv; x += 8) {
        __m256 a[kHeads];
        for (int u = 0; u < kHeads; ++u)
            a[u] = _mm256_mul_ps(_mm256_loadu_ps(acc + u * dv + x), _mm256_set1_ps(alpha[u]));
        for (int64_t j = 0; j < n; ++j) {
            const __m256 v = simd::load8(t.rows[j] + x);
#pragma GCC unroll 8
            for (int u = 0; u < kHeads; ++u) a[u] = _mm256_fmadd_ps(_mm256_broadcast_ss(&t.p[u][j]), v, a[u]);
        }
        for (int u = 0; u < kHeads; ++u) _mm256_storeu_ps(acc + u * dv + x, a[u]);
    }
    for (; x < dv; ++x) {
        for (int u = 0; u < kHeads; ++u) {
            float a = acc[u * dv + x] * alpha[u];
            for (int64_t j = 0; j < n; ++j) a += t.p[u][j] * simd::to_f32(t.rows[j][x]);
            acc[u * dv + x] = a;
        }
    }
}

template <typename W>
void absorb_q_head(const W* wk, int64_t nope, int64_t rank, const float* qn, float* o) {
    int64_t x = 0;
    for (; x + 32 <= rank; x += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t i = 0; i < nope; ++i) {
            const __m256 s = _mm256_set1_ps(qn[i]);
            const W* r = wk + i * rank + x;
            a0 = _mm256_fmadd_ps(s, simd::load8(r), a0);
            a1 = _mm256_fmadd_ps(s, simd::load8(r + 8), a1);
            a2 = _mm256_fmadd_ps(s, simd::load8(r + 16), a2);
            a3 = _mm256_fmadd_ps(s, simd::load8(r + 24), a3);
        }
        _mm256_storeu_ps(o + x, a0);
        _mm256_storeu_ps(o + x + 8, a1);
        _mm256_storeu_ps(o + x + 16, a2);
        _mm256_storeu_ps(o + x + 24, a3);
    }
    for (; x + 8 <= rank; x += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int64_t i = 0; i < nope; ++i)
            a = _mm256_fmadd_ps(_mm256_set1_ps(qn[i]), simd::load8(wk + i * rank + x), a);
        _mm256_storeu_ps(o + x, a);
    }
    for (; x < rank; ++x) {
        float a = 0.0f;
        for (int64_t i = 0; i < nope; ++i) a += qn[i] * simd::to_f32(wk[i * rank + x]);
        o[x] = a;
    }
}

template <typename W>
void expand_v_head(const W* wv, int64_t v_dim, int64_t rank, const float* l, float* o) {
    for (int64_t j = 0; j < v_dim; ++j) {
        const W* r = wv + j * rank;
        __m256 a = _mm256_setzero_ps();
        int64_t x = 0;
        for (; x + 8 <= rank; x += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(l + x), simd::load8(r + x), a);
        float s = simd::hsum(a);
        for (; x < rank; ++x) s += l[x] * simd::to_f32(r[x]);
        o[j] = s;
    }
}

// Split-KV: when a batch's (token, head group) items are fewer than the threads, a query token
// whose keys span more than one segment of kSegmentKeys keys gets one work item per (head group,
// segment); each writes its softmax state (acc, m, l) to a partial, and the partials are merged
// in key order afterwards. So the threads share a long sequence's keys even when its heads are
// one group (a TP rank of a small model, or the AVX-512 kernel's groups of 16).
constexpr int64_t kSegmentKeys = 256;

// Heads per group: kHeads for the AVX2 tiles, kMlaFlashHeads (one zmm of heads) for the AVX-512
// kernel (mla_attention_avx512.cpp), which takes caches whose rows are whole vectors (fp8: the
// latent too, so that each vector has one scale), and only at 16 heads or more: with 8 it fills half its lanes and
// measured slower than AVX2 (BM_MlaDecodeLong: 86-108 against 97-122 GFLOP/s; at 16 heads 163-187 against 105-122).
int64_t group_heads(const PagedLatentLayer& kv, const MlaAttentionArgs& a) {
    const int64_t latent_align = kv.dtype == DType::kF8E4M3 ? 16 : 8;
    const bool flash = active_isa() >= Isa::kAvx512 && kv.row_dim() % 16 == 0 && kv.kv_lora_rank % latent_align == 0 &&
                       a.num_heads >= detail::kMlaFlashHeads;
    return flash ? detail::kMlaFlashHeads : kHeads;
}
constexpr int64_t kMaxGroup = detail::kMlaFlashHeads;

// The online softmax state of one head group over some keys: acc [heads][dv] (not yet divided
// by l), m and l per head.
struct GroupState {
    float* acc;
    float m[kMaxGroup], l[kMaxGroup];
};

// Where a query token's keys are: its sequence's block table and its last key.
struct TokenKeys {
    const int32_t* table;
    int64_t pos;
};

TokenKeys token_keys(const MlaAttentionArgs& a, int64_t tok) {
    const int64_t s = std::upper_bound(a.query_start, a.query_start + a.num_seqs + 1, tok) - a.query_start - 1;
    const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
    const int64_t pos = a.causal ? a.seq_lens[s] - q_len + (tok - a.query_start[s]) : a.seq_lens[s] - 1;
    return {a.block_tables + s * a.max_blocks_per_seq, pos};
}

// Heads [h0, h0 + kHeads) of token tok over keys [k0, k1), from a fresh state into st (AVX2).
template <typename T>
void attend_keys_avx2(const PagedLatentLayer& kv, const MlaAttentionArgs& a, int64_t tok, int64_t h0,
                      const int32_t* table, int64_t k0, int64_t k1, const float* zero_q, Tile<T>& tile,
                      GroupState& st) {
    const T* cache = static_cast<const T*>(kv.cache);
    const int64_t dk = kv.row_dim(), dv = kv.kv_lora_rank;
    const float* q[kHeads];
    float alpha[kHeads];
    for (int u = 0; u < kHeads; ++u) {
        q[u] = h0 + u < a.num_heads ? a.q + (tok * a.num_heads + h0 + u) * dk : zero_q;
        st.m[u] = -INFINITY;
        st.l[u] = 0.0f;
    }
    std::fill(st.acc, st.acc + kHeads * dv, 0.0f);
    for (int64_t j0 = k0; j0 < k1; j0 += kTile) {
        const int64_t n = std::min(kTile, k1 - j0);
        for (int64_t j = 0; j < n; ++j) {
            const int64_t p = j0 + j;
            const int64_t slot = int64_t{table[p / kv.block_size]} * kv.block_size + p % kv.block_size;
            tile.rows[j] = cache + slot * dk;
            if constexpr (kScaled<T>) {
                tile.lf[j] = kv.scale[2 * slot] * simd::kE4m3Unit;
                tile.rf[j] = kv.scale[2 * slot + 1] * simd::kE4m3Unit;
            }
        }
        tile_scores(q, dk, dv, tile, n, a.scale);
        for (int u = 0; u < kHeads; ++u) {
            float* p = tile.p[u];
            float mt = -INFINITY;
            for (int64_t j = 0; j < n; ++j) mt = std::max(mt, p[j]);
            const float m_new = std::max(st.m[u], mt);
            alpha[u] = std::exp(st.m[u] - m_new);
            const float lt = simd::exp_shifted_sum(p, n, m_new);
            if constexpr (kScaled<T>) {  // each latent row's factor, folded into its weight
                for (int64_t j = 0; j < n; ++j) p[j] *= tile.lf[j];
            }
            st.l[u] = st.l[u] * alpha[u] + lt;
            st.m[u] = m_new;
        }
        accumulate(tile, n, dv, alpha, st.acc);
    }
}

// Heads [h0, h0 + gh) of token tok over keys [k0, k1), from a fresh state into st: the AVX-512
// kernel for groups of kMlaFlashHeads, the AVX2 tiles for groups of kHeads.
template <typename T>
void attend_keys(const PagedLatentLayer& kv, const MlaAttentionArgs& a, int64_t gh, int64_t tok, int64_t h0,
                 const int32_t* table, int64_t k0, int64_t k1, const float* zero_q, Tile<T>& tile, GroupState& st) {
    if (gh == detail::kMlaFlashHeads) {
        const int64_t dk = kv.row_dim(), n = std::min(gh, a.num_heads - h0);
        const float* q[detail::kMlaFlashHeads];
        for (int64_t u = 0; u < n; ++u) q[u] = a.q + (tok * a.num_heads + h0 + u) * dk;
        const detail::MlaFlashCache cache{
            kv.cache, kv.dtype == DType::kBF16,       kv.block_size, kv.kv_lora_rank, kv.rope_dim,
            table,    kScaled<T> ? kv.scale : nullptr};
        detail::mla_flash_keys_avx512(cache, q, n, a.scale, k0, k1, {st.acc, st.m, st.l});
        return;
    }
    attend_keys_avx2(kv, a, tok, h0, table, k0, k1, zero_q, tile, st);
}

// The group's heads of token tok written out: acc / l, and lse where asked for.
void finish_group(const MlaAttentionArgs& a, int64_t gh, int64_t tok, int64_t h0, int64_t dv, const GroupState& st) {
    for (int64_t u = 0; u < gh && h0 + u < a.num_heads; ++u) {
        float* out = a.out + (tok * a.num_heads + h0 + u) * dv;
        const float inv = 1.0f / st.l[u];
        for (int64_t x = 0; x < dv; ++x) out[x] = st.acc[size_t(u * dv + x)] * inv;
        if (a.lse) a.lse[tok * a.num_heads + h0 + u] = st.m[u] + std::log(st.l[u]);
    }
}

// A partial of a group of gh heads: acc [gh][dv], then m and l [gh]. Only the group's real heads
// (`heads`) are kept: the AVX-512 kernel leaves the state of the others unset.
void save_state(const GroupState& st, int64_t gh, int64_t heads, int64_t dv, float* slot) {
    std::copy(st.acc, st.acc + heads * dv, slot);
    std::copy(st.m, st.m + heads, slot + gh * dv);
    std::copy(st.l, st.l + heads, slot + gh * dv + gh);
}

// total = total merged with the next segment's partial (whose m is finite: a segment has a key),
// for the group's `heads` real heads; a total with m = -inf (the start) takes the partial as it is.
void merge_state(GroupState& total, const float* slot, int64_t gh, int64_t heads, int64_t dv) {
    const float* next_m = slot + gh * dv;
    const float* next_l = next_m + gh;
    for (int64_t u = 0; u < heads; ++u) {
        const float m_new = std::max(total.m[u], next_m[u]);
        const float a = std::exp(total.m[u] - m_new), b = std::exp(next_m[u] - m_new);
        total.l[u] = total.l[u] * a + next_l[u] * b;
        total.m[u] = m_new;
        float* acc = total.acc + u * dv;
        const float* nx = slot + u * dv;
        for (int64_t x = 0; x < dv; ++x) acc[x] = acc[x] * a + nx[x] * b;
    }
}

// The work items: (token, head group) for tokens with one segment of keys, (token, head group,
// segment) for the others, whose states go to partials [item][gh * (dv + 2)].
struct MlaPlan {
    struct Split {
        int64_t tok, first_item, segments;
    };
    std::vector<int64_t> whole;  // tokens attended in one item per group
    std::vector<Split> split;
    int64_t gh = 0, groups = 0, whole_items = 0, split_items = 0;

    int64_t heads_in(const MlaAttentionArgs& a, int64_t group) const { return std::min(gh, a.num_heads - group * gh); }
};

// Tokens are split only when their head groups are fewer than the threads: otherwise the groups
// already occupy every thread, and the partials would only add work (AVX2 at 16 heads, 2 threads:
// 3-6% slower decode at 4096 tokens when split).
MlaPlan plan_items(const PagedLatentLayer& kv, const MlaAttentionArgs& a, int threads) {
    MlaPlan plan;
    plan.gh = group_heads(kv, a);
    plan.groups = (a.num_heads + plan.gh - 1) / plan.gh;
    const bool split = a.num_tokens * plan.groups < threads;
    for (int64_t tok = 0; tok < a.num_tokens; ++tok) {
        const int64_t segments = (token_keys(a, tok).pos + kSegmentKeys) / kSegmentKeys;
        if (!split || segments == 1) {
            plan.whole.push_back(tok);
            continue;
        }
        plan.split.push_back({tok, plan.split_items, segments});
        plan.split_items += plan.groups * segments;
    }
    plan.whole_items = int64_t(plan.whole.size()) * plan.groups;
    return plan;
}

// Each split token's groups: its segments merged in key order, then written out.
void merge_split_tokens(ThreadPool& pool, const MlaAttentionArgs& a, const MlaPlan& plan, int64_t dv,
                        const float* partials) {
    const int64_t gh = plan.gh, state_floats = gh * (dv + 2);
    pool.parallel_for(int64_t(plan.split.size()) * plan.groups, [&](int64_t begin, int64_t end) {
        std::vector<float> acc(static_cast<size_t>(gh * dv));
        GroupState total{acc.data(), {}, {}};
        for (int64_t i = begin; i < end; ++i) {
            const MlaPlan::Split& sp = plan.split[size_t(i / plan.groups)];
            const int64_t group = i % plan.groups, heads = plan.heads_in(a, group);
            std::fill(total.acc, total.acc + gh * dv, 0.0f);
            std::fill(total.m, total.m + gh, -INFINITY);
            std::fill(total.l, total.l + gh, 0.0f);
            for (int64_t seg = 0; seg < sp.segments; ++seg) {
                merge_state(total, partials + (sp.first_item + group * sp.segments + seg) * state_floats, gh, heads,
                            dv);
            }
            finish_group(a, gh, sp.tok, group * gh, dv, total);
        }
    });
}

template <typename T>
void run_mla_attention(ThreadPool& pool, const PagedLatentLayer& kv, const MlaAttentionArgs& a) {
    const MlaPlan plan = plan_items(kv, a, pool.num_threads());
    const int64_t dk = kv.row_dim(), dv = kv.kv_lora_rank, gh = plan.gh, state_floats = gh * (dv + 2);
    const int64_t num_items = plan.whole_items + plan.split_items;
    // The caller's, reused across calls; the workers use its pointer (a thread_local named in
    // their lambda would be their own).
    thread_local std::vector<float> partial_buffer;
    if (partial_buffer.size() < size_t(plan.split_items * state_floats)) {
        partial_buffer.resize(size_t(plan.split_items * state_floats));
    }
    float* const partials = partial_buffer.data();
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        Tile<T> tile;
        std::vector<float> acc(static_cast<size_t>(gh * dv)), zero_q(static_cast<size_t>(dk), 0.0f);
        GroupState st{acc.data(), {}, {}};
        for (int64_t item = next.fetch_add(1); item < num_items; item = next.fetch_add(1)) {
            if (item < plan.whole_items) {
                const int64_t tok = plan.whole[size_t(item / plan.groups)], h0 = (item % plan.groups) * gh;
                const TokenKeys keys = token_keys(a, tok);
                attend_keys(kv, a, gh, tok, h0, keys.table, 0, keys.pos + 1, zero_q.data(), tile, st);
                finish_group(a, gh, tok, h0, dv, st);
                continue;
            }
            const int64_t local = item - plan.whole_items;
            const auto sp = std::upper_bound(plan.split.begin(), plan.split.end(), local,
                                             [](int64_t v, const MlaPlan::Split& x) { return v < x.first_item; }) -
                            1;
            const int64_t within = local - sp->first_item, group = within / sp->segments, h0 = group * gh;
            const int64_t k0 = (within % sp->segments) * kSegmentKeys;
            const TokenKeys keys = token_keys(a, sp->tok);
            attend_keys(kv, a, gh, sp->tok, h0, keys.table, k0, std::min(k0 + kSegmentKeys, keys.pos + 1),
                        zero_q.data(), tile, st);
            save_state(st, gh, plan.heads_in(a, group), dv, partials + local * state_floats);
        }
    });
    if (!plan.split.empty()) merge_split_tokens(pool, a, plan, dv, partials);
}

}  // namespace

void write_latent(const PagedLatentLayer& kv, const float* rows, int64_t num_tokens, const int64_t* slot_mapping) {
    const int64_t d = kv.row_dim(), r = kv.kv_lora_rank;
    const size_t esize = dtype_size(kv.dtype);
    auto* cache = static_cast<std::byte*>(kv.cache);
    for (int64_t t = 0; t < num_tokens; ++t) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        MOESERVE_DCHECK(slot < kv.num_blocks * kv.block_size, "write_latent: slot {} out of range", slot);
        if (kv.dtype == DType::kF8E4M3) {  // the latent and k_pe each with their scale
            auto* dst = reinterpret_cast<uint8_t*>(cache) + slot * d;
            kv.scale[2 * slot] = store_f32_row_e4m3(dst, rows + t * d, r);
            kv.scale[2 * slot + 1] = store_f32_row_e4m3(dst + r, rows + t * d + r, d - r);
            continue;
        }
        store_f32_row(cache + size_t(slot * d) * esize, kv.dtype, rows + t * d, d);
    }
}

namespace {
// out[x] = value of src[x] * factor for x < n (the widened codes times the row's scale * kE4m3Unit).
void widen_e4m3(const simd::E4m3* src, int64_t n, float factor, float* out) {
    const __m256 f = _mm256_set1_ps(factor);
    int64_t x = 0;
    for (; x + 8 <= n; x += 8) _mm256_storeu_ps(out + x, _mm256_mul_ps(simd::load8(src + x), f));
    for (; x < n; ++x) out[x] = simd::to_f32(src[x]) * factor;
}
}  // namespace

void read_latent(const PagedLatentLayer& kv, const int32_t* table, int64_t begin, int64_t end, float* out) {
    const int64_t d = kv.row_dim();
    for (int64_t j = begin; j < end; ++j) {
        const int64_t off = (int64_t{table[j / kv.block_size]} * kv.block_size + j % kv.block_size) * d;
        float* o = out + (j - begin) * d;
        if (kv.dtype == DType::kF8E4M3) {
            const int64_t slot = off / d, r = kv.kv_lora_rank;
            const auto* src = static_cast<const simd::E4m3*>(kv.cache) + off;
            widen_e4m3(src, r, kv.scale[2 * slot] * simd::kE4m3Unit, o);
            widen_e4m3(src + r, d - r, kv.scale[2 * slot + 1] * simd::kE4m3Unit, o + r);
        } else if (kv.dtype == DType::kBF16) {
            const uint16_t* src = static_cast<const uint16_t*>(kv.cache) + off;
            int64_t x = 0;
            for (; x + 8 <= d; x += 8) _mm256_storeu_ps(o + x, simd::load8(src + x));
            for (; x < d; ++x) o[x] = simd::to_f32(src[x]);
        } else {
            std::memcpy(o, static_cast<const float*>(kv.cache) + off, size_t(d) * sizeof(float));
        }
    }
}

void mla_attention(ThreadPool& pool, const PagedLatentLayer& kv, const MlaAttentionArgs& a) {
    MOESERVE_CHECK(kv.dtype == DType::kF32 || kv.dtype == DType::kBF16 || kv.dtype == DType::kF8E4M3,
                   "mla_attention: latent cache dtype {}", dtype_name(kv.dtype));
    if (kv.dtype == DType::kF8E4M3) {
        MOESERVE_CHECK(kv.scale != nullptr, "mla_attention: an fp8 latent cache without scales");
        run_mla_attention<simd::E4m3>(pool, kv, a);
    } else if (kv.dtype == DType::kBF16) {
        run_mla_attention<uint16_t>(pool, kv, a);
    } else {
        run_mla_attention<float>(pool, kv, a);
    }
}

void mla_absorb_q(ThreadPool& pool, const MlaKvB& w, const float* q, int64_t num_tokens, int64_t q_token_stride,
                  int64_t q_head_stride, float* out, int64_t out_token_stride, int64_t out_head_stride) {
    const int64_t rank = w.kv_lora_rank, head_rows = w.nope_dim + w.v_dim;
    pool.parallel_for(w.num_heads, [&](int64_t h_begin, int64_t h_end) {
        for (int64_t h = h_begin; h < h_end; ++h) {
            for (int64_t t = 0; t < num_tokens; ++t) {
                const float* qn = q + t * q_token_stride + h * q_head_stride;
                float* o = out + t * out_token_stride + h * out_head_stride;
                if (w.w_bf16) {
                    absorb_q_head(w.w_bf16 + h * head_rows * rank, w.nope_dim, rank, qn, o);
                } else {
                    absorb_q_head(w.w_f32 + h * head_rows * rank, w.nope_dim, rank, qn, o);
                }
            }
        }
    });
}

void mla_expand_v(ThreadPool& pool, const MlaKvB& w, const float* latent, int64_t num_tokens, float* out) {
    const int64_t rank = w.kv_lora_rank, head_rows = w.nope_dim + w.v_dim;
    pool.parallel_for(w.num_heads, [&](int64_t h_begin, int64_t h_end) {
        for (int64_t h = h_begin; h < h_end; ++h) {
            const int64_t off = (h * head_rows + w.nope_dim) * rank;
            for (int64_t t = 0; t < num_tokens; ++t) {
                const float* l = latent + (t * w.num_heads + h) * rank;
                float* o = out + (t * w.num_heads + h) * w.v_dim;
                if (w.w_bf16) {
                    expand_v_head(w.w_bf16 + off, w.v_dim, rank, l, o);
                } else {
                    expand_v_head(w.w_f32 + off, w.v_dim, rank, l, o);
                }
            }
        }
    });
}

}  // namespace moeserve::kernels::cpu
