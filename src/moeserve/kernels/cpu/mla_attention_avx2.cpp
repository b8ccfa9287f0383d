// AVX2 MLA kernels. Attention: work items are (query token, group of kHeads heads); the heads of a
// group share the token's causal range and every cached row, so each tile of kTile rows is
// loaded once for kHeads dot products and kHeads weighted sums (online softmax per head).
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
#include "moeserve/kernels/cpu/mla_attention.h"
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

template <typename T>
void run_mla_attention(ThreadPool& pool, const PagedLatentLayer& kv, const MlaAttentionArgs& a) {
    const T* cache = static_cast<const T*>(kv.cache);
    const int64_t dk = kv.row_dim(), dv = kv.kv_lora_rank;
    const int64_t groups = (a.num_heads + kHeads - 1) / kHeads;
    const int64_t num_items = a.num_tokens * groups;
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        Tile<T> tile;
        std::vector<float> acc(static_cast<size_t>(kHeads * dv));
        std::vector<float> zero_q(static_cast<size_t>(dk), 0.0f), sink(static_cast<size_t>(dv));
        for (int64_t item = next.fetch_add(1); item < num_items; item = next.fetch_add(1)) {
            const int64_t tok = item / groups, h0 = (item % groups) * kHeads;
            const int64_t s = std::upper_bound(a.query_start, a.query_start + a.num_seqs + 1, tok) - a.query_start - 1;
            const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
            const int64_t pos = a.causal ? a.seq_lens[s] - q_len + (tok - a.query_start[s]) : a.seq_lens[s] - 1;
            const int32_t* table = a.block_tables + s * a.max_blocks_per_seq;
            const float* q[kHeads];
            float m[kHeads], l[kHeads], alpha[kHeads];
            for (int u = 0; u < kHeads; ++u) {
                q[u] = h0 + u < a.num_heads ? a.q + (tok * a.num_heads + h0 + u) * dk : zero_q.data();
                m[u] = -INFINITY;
                l[u] = 0.0f;
            }
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t j0 = 0; j0 <= pos; j0 += kTile) {
                const int64_t n = std::min(kTile, pos + 1 - j0);
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
                    const float m_new = std::max(m[u], mt);
                    alpha[u] = std::exp(m[u] - m_new);
                    float lt = 0.0f;
                    int64_t j = 0;
                    for (; j + 8 <= n; j += 8) {
                        const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_load_ps(p + j), _mm256_set1_ps(m_new)));
                        _mm256_store_ps(p + j, e);
                        lt += simd::hsum(e);
                    }
                    for (; j < n; ++j) lt += p[j] = std::exp(p[j] - m_new);
                    if constexpr (kScaled<T>) {  // each latent row's factor, folded into its weight
                        for (j = 0; j < n; ++j) p[j] *= tile.lf[j];
                    }
                    l[u] = l[u] * alpha[u] + lt;
                    m[u] = m_new;
                }
                accumulate(tile, n, dv, alpha, acc.data());
            }
            for (int u = 0; u < kHeads; ++u) {
                float* out = h0 + u < a.num_heads ? a.out + (tok * a.num_heads + h0 + u) * dv : sink.data();
                const float inv = 1.0f / l[u];
                for (int64_t x = 0; x < dv; ++x) out[x] = acc[size_t(u * dv + x)] * inv;
                if (a.lse && h0 + u < a.num_heads) a.lse[tok * a.num_heads + h0 + u] = m[u] + std::log(l[u]);
            }
        }
    });
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
