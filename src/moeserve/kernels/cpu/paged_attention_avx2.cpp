// AVX2 paged attention: work items are (sequence, query head) pairs handed out dynamically; each
// walks its queries and, per query, tiles of up to kTile keys with an online softmax (running
// max m, sum l, accumulator rescaled by exp(m_old - m_new)). Scores of 8 keys come out of one
// transpose-reduce (hsum8). write_kv copies new keys/values into their slots.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/paged_attention.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

constexpr int64_t kTile = 64;

struct Tile {
    const float* k[kTile];
    const float* v[kTile];
    alignas(32) float p[kTile];
};

// scores[j] = dot(q, k[j]) * scale for j < n.
void tile_scores(const float* q, int64_t d, Tile& t, int64_t n, float scale) {
    int64_t j = 0;
    if (d % 8 == 0) {
        for (; j + 8 <= n; j += 8) {
            __m256 a[8];
            for (int u = 0; u < 8; ++u) a[u] = _mm256_setzero_ps();
            for (int64_t x = 0; x < d; x += 8) {
                const __m256 qv = _mm256_loadu_ps(q + x);
#pragma GCC unroll 8
                for (int u = 0; u < 8; ++u) a[u] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(t.k[j + u] + x), a[u]);
            }
            const __m256 s = simd::hsum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
            _mm256_store_ps(t.p + j, _mm256_mul_ps(s, _mm256_set1_ps(scale)));
        }
    }
    for (; j < n; ++j) {
        __m256 a = _mm256_setzero_ps();
        int64_t x = 0;
        for (; x + 8 <= d; x += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + x), _mm256_loadu_ps(t.k[j] + x), a);
        float s = simd::hsum(a);
        for (; x < d; ++x) s += q[x] * t.k[j][x];
        t.p[j] = s * scale;
    }
}

// One query against keys [0, pos]; out f32 [d]. acc: scratch of d floats.
void attend_one(const PagedKvLayer& kv, const int32_t* table, int64_t kvh, const float* q, int64_t pos,
                float scale, Tile& t, float* acc, float* out) {
    const int64_t d = kv.head_dim, bs = kv.block_size, row_stride = kv.num_kv_heads * d;
    float m = -INFINITY, l = 0.0f;
    std::fill(acc, acc + d, 0.0f);
    for (int64_t j0 = 0; j0 <= pos; j0 += kTile) {
        const int64_t n = std::min(kTile, pos + 1 - j0);
        for (int64_t j = 0; j < n; ++j) {
            const int64_t p = j0 + j;
            const int64_t off = (int64_t{table[p / bs]} * bs + p % bs) * row_stride + kvh * d;
            t.k[j] = kv.k_cache + off;
            t.v[j] = kv.v_cache + off;
        }
        tile_scores(q, d, t, n, scale);
        float mt = -INFINITY;
        for (int64_t j = 0; j < n; ++j) mt = std::max(mt, t.p[j]);
        const float m_new = std::max(m, mt);
        const float alpha = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
        float lt = 0.0f;
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_load_ps(t.p + j), _mm256_set1_ps(m_new)));
            _mm256_store_ps(t.p + j, e);
            lt += simd::hsum(e);
        }
        for (; j < n; ++j) lt += t.p[j] = std::exp(t.p[j] - m_new);
        l = l * alpha + lt;
        m = m_new;
        int64_t x = 0;
        for (; x + 8 <= d; x += 8) {
            __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + x), _mm256_set1_ps(alpha));
            for (int64_t u = 0; u < n; ++u) a = _mm256_fmadd_ps(_mm256_set1_ps(t.p[u]), _mm256_loadu_ps(t.v[u] + x), a);
            _mm256_storeu_ps(acc + x, a);
        }
        for (; x < d; ++x) {
            float a = acc[x] * alpha;
            for (int64_t u = 0; u < n; ++u) a += t.p[u] * t.v[u][x];
            acc[x] = a;
        }
    }
    const float inv = 1.0f / l;
    for (int64_t x = 0; x < d; ++x) out[x] = acc[x] * inv;
}

}  // namespace

void write_kv(const PagedKvLayer& kv, const float* k, const float* v, int64_t num_tokens,
              const int64_t* slot_mapping) {
    const int64_t row = kv.num_kv_heads * kv.head_dim;
    for (int64_t t = 0; t < num_tokens; ++t) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        MOESERVE_DCHECK(slot < kv.num_blocks * kv.block_size, "write_kv: slot {} out of range", slot);
        std::memcpy(kv.k_cache + slot * row, k + t * row, size_t(row) * sizeof(float));
        std::memcpy(kv.v_cache + slot * row, v + t * row, size_t(row) * sizeof(float));
    }
}

void paged_attention(ThreadPool& pool, const PagedKvLayer& kv, const PagedAttentionArgs& a) {
    MOESERVE_CHECK(a.num_heads % kv.num_kv_heads == 0, "paged_attention: num_heads={} num_kv_heads={}",
                   a.num_heads, kv.num_kv_heads);
    const int64_t d = kv.head_dim, group = a.num_heads / kv.num_kv_heads;
    const int64_t num_items = a.num_seqs * a.num_heads;
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        Tile tile;
        std::vector<float> acc(static_cast<size_t>(d));
        for (int64_t item = next.fetch_add(1); item < num_items; item = next.fetch_add(1)) {
            const int64_t s = item / a.num_heads, h = item % a.num_heads;
            const int64_t q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
            const int32_t* table = a.block_tables + s * a.max_blocks_per_seq;
            for (int64_t i = 0; i < q_len; ++i) {
                const int64_t tok = (q0 + i) * a.num_heads + h;
                attend_one(kv, table, h / group, a.q + tok * d, a.seq_lens[s] - q_len + i, a.scale, tile,
                           acc.data(), a.out + tok * d);
            }
        }
    });
}

}  // namespace moeserve::kernels::cpu
