// AVX-512 MLA attention (absorbed form) for up to 16 heads of one query token, where the heads
// are the vector lanes, as the paged flash block's rows are: the queries, times the scale, are
// transposed once into qt [dk][16]; keys go by tiles of kKeys rows widened to f32 into kf (the
// latent and k_pe of a key are one row, and its first kv_lora_rank values are also its value);
// a key's 16 scores are one zmm, sum_x qt[x] * broadcast(kf[key][x]) in an 8-key register block;
// the online softmax (running max, sum, rescale) is element-wise across heads; the output
// accumulates transposed, ot[x] = ot[x] * alpha + sum_j p[j] * broadcast(kf[j][x]), 8 x-values
// at a time, and is transposed back once at the end. Every FMA does 16 heads' work, against 8 in
// the AVX2 kernel, with no horizontal sums. f32, bf16 and fp8 caches: an fp8 row is widened and
// multiplied by its two scales (latent, k_pe) once, as it enters kf, so the rest is the f32 code.
// NOTE: no std or project inline code here (see matmul_tile_isa.h): helpers live in this
// anonymous namespace, buffers come from thread_scratch().
#include <immintrin.h>

#include <cstdint>

#include "moeserve/kernels/cpu/matmul_tile_isa.h"
#include "moeserve/kernels/cpu/mla_attention_isa.h"
#include "moeserve/kernels/cpu/simd_avx512.h"

namespace moeserve::kernels::cpu::detail {
namespace {

using simd512::exp16;
using simd512::widen16;

constexpr int64_t kH = kMlaFlashHeads;
constexpr int64_t kKeys = 16;      // keys per tile: 16 widened rows of 576 floats are 36 KiB
constexpr int kAttentionSlot = 4;  // thread_scratch slot (matmul_tile_isa.h), shared with paged attention

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// kf [j][0, dk) = the widened rows of keys j0 + j, j < n (dk a multiple of 16; for fp8 the
// latent's kv_lora_rank too, so that no vector straddles the two scales).
template <typename T>
void load_rows(const MlaFlashCache& kv, int64_t j0, int64_t n, int64_t dk, float* kf) {
    const T* cache = static_cast<const T*>(kv.cache);
    for (int64_t j = 0; j < n; ++j) {
        const int64_t p = j0 + j;
        const int64_t slot = int64_t{kv.block_table[p / kv.block_size]} * kv.block_size + p % kv.block_size;
        const T* row = cache + slot * dk;
        if (kv.fp8_scale != nullptr) {  // codes times 2^-8 (widen16), times scale * 2^8
            const __m512 latent = _mm512_set1_ps(kv.fp8_scale[2 * slot] * simd512::kE4m3Unit);
            const __m512 rope = _mm512_set1_ps(kv.fp8_scale[2 * slot + 1] * simd512::kE4m3Unit);
            for (int64_t x = 0; x < dk; x += 16) {
                _mm512_store_ps(kf + j * dk + x, _mm512_mul_ps(widen16(row + x), x < kv.kv_lora_rank ? latent : rope));
            }
            continue;
        }
        for (int64_t x = 0; x < dk; x += 16) _mm512_store_ps(kf + j * dk + x, widen16(row + x));
    }
}

// st[j] = qt^T kf[j] for j < n: the 16 heads' scores of key j.
void tile_scores(const float* qt, const float* kf, int64_t dk, int64_t n, float* st) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512 a[8];
        for (int u = 0; u < 8; ++u) a[u] = _mm512_setzero_ps();
        for (int64_t x = 0; x < dk; ++x) {
            const __m512 q = _mm512_load_ps(qt + x * kH);
#pragma GCC unroll 8
            for (int u = 0; u < 8; ++u) a[u] = _mm512_fmadd_ps(q, _mm512_set1_ps(kf[(j + u) * dk + x]), a[u]);
        }
        for (int u = 0; u < 8; ++u) _mm512_store_ps(st + (j + u) * kH, a[u]);
    }
    for (; j < n; ++j) {
        __m512 a = _mm512_setzero_ps();
        for (int64_t x = 0; x < dk; ++x)
            a = _mm512_fmadd_ps(_mm512_load_ps(qt + x * kH), _mm512_set1_ps(kf[j * dk + x]), a);
        _mm512_store_ps(st + j * kH, a);
    }
}

// The tile's online softmax across heads: st[j] = exp(st[j] - m_new); returns alpha and updates
// m, l (every key of the range is visible: the caller bounds it by the token's position).
__m512 tile_softmax(float* st, int64_t n, __m512& m, __m512& l) {
    __m512 mt = _mm512_load_ps(st);
    for (int64_t j = 1; j < n; ++j) mt = _mm512_max_ps(mt, _mm512_load_ps(st + j * kH));
    const __m512 m_new = _mm512_max_ps(m, mt);
    const __m512 alpha = exp16(_mm512_sub_ps(m, m_new));  // 0 on the first tile (m = -inf)
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
        const __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(st + j * kH), m_new));
        _mm512_store_ps(st + j * kH, e);
        sum = _mm512_add_ps(sum, e);
    }
    l = _mm512_fmadd_ps(l, alpha, sum);
    m = m_new;
    return alpha;
}

// ot[x] = ot[x] alpha + sum_j st[j] kf[j][x] for x < dv (a multiple of 8).
void tile_pv(const float* st, const float* kf, int64_t dk, int64_t dv, int64_t n, __m512 alpha, float* ot) {
    for (int64_t x0 = 0; x0 < dv; x0 += 8) {
        __m512 a[8];
        for (int u = 0; u < 8; ++u) a[u] = _mm512_mul_ps(_mm512_load_ps(ot + (x0 + u) * kH), alpha);
        for (int64_t j = 0; j < n; ++j) {
            const __m512 p = _mm512_load_ps(st + j * kH);
#pragma GCC unroll 8
            for (int u = 0; u < 8; ++u) a[u] = _mm512_fmadd_ps(p, _mm512_set1_ps(kf[j * dk + x0 + u]), a[u]);
        }
        for (int u = 0; u < 8; ++u) _mm512_store_ps(ot + (x0 + u) * kH, a[u]);
    }
}

template <typename T>
void flash_keys(const MlaFlashCache& kv, const float* const* q, int64_t n, float scale, int64_t k0, int64_t k1,
                const MlaFlashState& out) {
    const int64_t dv = kv.kv_lora_rank, dk = dv + kv.rope_dim;
    // qt [dk][16], ot [dv][16], st [kKeys][16], kf [kKeys][dk]
    auto* b = static_cast<float*>(thread_scratch(kAttentionSlot, (dk * kH + dv * kH + kKeys * kH + kKeys * dk) * 4));
    float *qt = b, *ot = qt + dk * kH, *st = ot + dv * kH, *kf = st + kKeys * kH;
    for (int64_t u = 0; u < kH; ++u) {
        for (int64_t x = 0; x < dk; ++x) qt[x * kH + u] = u < n ? q[u][x] * scale : 0.0f;
    }
    for (int64_t i = 0; i < dv * kH; i += 16) _mm512_store_ps(ot + i, _mm512_setzero_ps());
    __m512 m = _mm512_set1_ps(-__builtin_inff()), l = _mm512_setzero_ps();
    for (int64_t j0 = k0; j0 < k1; j0 += kKeys) {
        const int64_t nk = imin(kKeys, k1 - j0);
        load_rows<T>(kv, j0, nk, dk, kf);
        tile_scores(qt, kf, dk, nk, st);
        const __m512 alpha = tile_softmax(st, nk, m, l);
        tile_pv(st, kf, dk, dv, nk, alpha, ot);
    }
    alignas(64) float ms[kH], ls[kH];
    _mm512_store_ps(ms, m);
    _mm512_store_ps(ls, l);
    for (int64_t u = 0; u < n; ++u) {
        out.m[u] = ms[u];
        out.l[u] = ls[u];
        for (int64_t x = 0; x < dv; ++x) out.acc[u * dv + x] = ot[x * kH + u];
    }
}

}  // namespace

void mla_flash_keys_avx512(const MlaFlashCache& kv, const float* const* q, int64_t n, float scale, int64_t k0,
                           int64_t k1, const MlaFlashState& out) {
    if (kv.fp8_scale != nullptr) {
        flash_keys<uint8_t>(kv, q, n, scale, k0, k1, out);
    } else if (kv.bf16) {
        flash_keys<uint16_t>(kv, q, n, scale, k0, k1, out);
    } else {
        flash_keys<float>(kv, q, n, scale, k0, k1, out);
    }
}

}  // namespace moeserve::kernels::cpu::detail
