// AVX-512 attention over a paged cache for up to 32 query rows that read one kv head.
// Prefill chunks (consecutive tokens times the heads of a GQA group; more than 8 rows) take the
// flash block, where the rows are the vector lanes: the
// block's queries are transposed once into qt [head_dim][32], so the scores of one key are two
// zmm (S^T [key][row]), the online softmax (running max m, sum l, rescale alpha) runs across rows
// without horizontal reductions, and the output accumulates transposed (ot [head_dim][32]) with
// one broadcast V element per FMA pair. Keys go by tiles of kKeys, widened exactly to f32 into an
// L1 buffer (bf16: shift; fp8: through f16, times the row's scale) and shared by all 32 rows; no
// score matrix is materialized beyond one tile. Up to 8 rows per kv head (decode) take the
// decode kernel, where the keys are the lanes instead, with the same operations in the same
// order, so a row's bits do not depend on which kernel ran it (see there); a decode-shaped
// sequence comes here one key segment at a time over all its kv heads (flash_decode_segment),
// and both kernels merge segments alike (merge_state). Arithmetic is f32 throughout.
// NOTE: no std or project inline code here (see matmul_tile_isa.h): helpers live in this
// anonymous namespace, buffers come from thread_scratch().
#include <immintrin.h>

#include <cstdint>

#include "moeserve/kernels/cpu/matmul_tile_isa.h"
#include "moeserve/kernels/cpu/paged_attention_isa.h"
#include "moeserve/kernels/cpu/simd_avx512.h"

namespace moeserve::kernels::cpu::detail {
namespace {

using simd512::exp16;
using simd512::kE4m3Unit;
using simd512::widen16;

constexpr int64_t kKeys = 32;  // keys per tile: their widened K and V rows (2 x 8 KiB at d=64) stay in L1
constexpr int64_t kR = kFlashRows;
constexpr int kAttentionSlot = 4;  // thread_scratch slot (matmul_tile_isa.h)

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// The scratch of one block, in floats: qt, ot (this segment's output) and total_o (the segments
// merged so far) [d][kR], st [kKeys][kR], kf and vf [kKeys][d], then m, l, alpha, total_m,
// total_l [kR] and the rows' positions and window starts as int32 [kR].
struct Scratch {
    float *qt, *ot, *total_o, *st, *kf, *vf, *m, *l, *alpha, *total_m, *total_l;
    int32_t *pos, *lo;
};
Scratch make_scratch(int64_t d) {
    const int64_t floats = 3 * d * kR + kKeys * kR + 2 * kKeys * d + 7 * kR;
    auto* b = static_cast<float*>(thread_scratch(kAttentionSlot, floats * 4));
    Scratch s{};
    s.qt = b;
    s.ot = s.qt + d * kR;
    s.total_o = s.ot + d * kR;
    s.st = s.total_o + d * kR;
    s.kf = s.st + kKeys * kR;
    s.vf = s.kf + kKeys * d;
    s.m = s.vf + kKeys * d;
    s.l = s.m + kR;
    s.alpha = s.l + kR;
    s.total_m = s.alpha + kR;
    s.total_l = s.total_m + kR;
    s.pos = reinterpret_cast<int32_t*>(s.total_l + kR);
    s.lo = s.pos + kR;
    return s;
}

// Merging one segment's (m, l, o) into the total (M, L, O), per element, the same operations in
// both kernels: M' = max(M, m), a = exp(M - M'), b = exp(m - M'), L' = fma(l, b, L a),
// O' = fma(o, b, O a). An empty side (m = -inf, l = 0, o = 0) gets weight 0 (exp16 maps the NaN
// of -inf - -inf to 0 too), so merging into an empty total copies the segment exactly (b = 1).
struct MergeWeights {
    __m512 a, b;
};
inline MergeWeights merge_state(float* total_m, float* total_l, __m512 m, __m512 l, __mmask16 lanes) {
    const __m512 big_m = _mm512_maskz_loadu_ps(lanes, total_m), m_new = _mm512_max_ps(big_m, m);
    const MergeWeights w{exp16(_mm512_sub_ps(big_m, m_new)), exp16(_mm512_sub_ps(m, m_new))};
    _mm512_mask_storeu_ps(total_m, lanes, m_new);
    _mm512_mask_storeu_ps(total_l, lanes,
                          _mm512_fmadd_ps(l, w.b, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, total_l), w.a)));
    return w;
}
inline __m512 merge_output(__m512 total_o, __m512 o, const MergeWeights& w) {
    return _mm512_fmadd_ps(o, w.b, _mm512_mul_ps(total_o, w.a));
}

// Key positions walked one by one through the paged cache: a division per key is not free.
struct KeyWalk {
    int64_t block, row;  // the key's block-table entry, and its row in that block
    KeyWalk(int64_t j, int64_t block_size) : block(j / block_size), row(j % block_size) {}
    // The cache row of this key in kv's kv head.
    int64_t head_row(const FlashKvHead& kv) const {
        return (int64_t{kv.block_table[block]} * kv.block_size + row) * kv.num_kv_heads + kv.kv_head;
    }
    void next(int64_t block_size) {
        if (++row == block_size) {
            row = 0;
            ++block;
        }
    }
};

// In place: r[i] lane j becomes the old r[j] lane i. Pairs within 128-bit blocks, then 4x4
// blocks of 4-float groups.
inline void transpose16(__m512* r) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      // per block: a0 b0 a1 b1
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3
    }
    for (int g = 0; g < 16; g += 4) {  // rows g..g+3 = a b c d: r[g + k] block L = a..d at 4L + k
        r[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xee);
        r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xee);
    }
    for (int k = 0; k < 4; ++k) {  // output row 4L + k = block L of r[k], r[4 + k], r[8 + k], r[12 + k]
        const __m512 u = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x44),
                     v = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x44);
        const __m512 u2 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xee),
                     v2 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xee);
        t[k] = _mm512_shuffle_f32x4(u, v, 0x88);
        t[4 + k] = _mm512_shuffle_f32x4(u, v, 0xdd);
        t[8 + k] = _mm512_shuffle_f32x4(u2, v2, 0x88);
        t[12 + k] = _mm512_shuffle_f32x4(u2, v2, 0xdd);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// kt [d][kKeys] = the widened K rows of keys j0 + j, j < n, transposed in registers 16 keys at a
// time (lanes of keys past n hold key j0's values: they are masked).
template <typename T, bool kScaled>
void transpose_k_rows(const T* const* k_rows, const float* k_scales, int64_t d, int64_t n, float* kt) {
    for (int64_t h = 0; h < n; h += 16) {
        for (int64_t x0 = 0; x0 < d; x0 += 16) {
            __m512 r[16];
            for (int64_t j = 0; j < 16; ++j) {
                const int64_t key = h + j < n ? h + j : 0;
                r[j] = widen16(k_rows[key] + x0);
                if (kScaled) r[j] = _mm512_mul_ps(r[j], _mm512_set1_ps(k_scales[key]));
            }
            transpose16(r);
            for (int64_t x = 0; x < 16; ++x) _mm512_store_ps(kt + (x0 + x) * kKeys + h, r[x]);
        }
    }
}

// transpose_k_rows for a bf16 cache, at half the shuffles: the K rows are transposed as they
// are stored, as 32-bit pairs of elements (x, x + 1), 32 elements of 16 keys per transpose16;
// each pair then gives key lanes of x (the low half shifted up) and of x + 1 (the high half
// masked), the same f32 values widen16 makes.
inline void transpose_k_pairs(const uint16_t* const* k_rows, int64_t d, int64_t n, float* kt) {
    const __m512i high = _mm512_set1_epi32(int32_t(0xffff0000u));
    for (int64_t h = 0; h < n; h += 16) {
        for (int64_t x0 = 0; x0 < d; x0 += 32) {
            const int64_t pairs = d - x0 >= 32 ? 16 : 8;  // head_dim is a multiple of 16
            const __mmask16 load = pairs == 16 ? __mmask16(0xffff) : __mmask16(0x00ff);
            __m512 r[16];
            for (int64_t j = 0; j < 16; ++j) {
                r[j] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(load, k_rows[h + j < n ? h + j : 0] + x0));
            }
            transpose16(r);
            for (int64_t i = 0; i < pairs; ++i) {
                const __m512i pair = _mm512_castps_si512(r[i]);
                _mm512_store_ps(kt + (x0 + 2 * i) * kKeys + h, _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16)));
                _mm512_store_ps(kt + (x0 + 2 * i + 1) * kKeys + h, _mm512_castsi512_ps(_mm512_and_si512(pair, high)));
            }
        }
    }
}

// kf [j][0, d) and vf [j][0, d) = the widened K and V rows of keys j0 + j, j < n, for the flash
// block; fp8 rows are multiplied by their scale here. No software prefetch: the flash block does
// 4-8x the work per tile of the decode kernel, and measured faster without (prefill 4096 tokens
// +1-7%, docs/performance.md): its prefetches only filled the miss buffers.
template <typename T, bool kScaled>
void load_tile(const FlashKvHead& kv, int64_t j0, int64_t n, float* kf, float* vf) {
    const T* k_cache = static_cast<const T*>(kv.k_cache);
    const T* v_cache = static_cast<const T*>(kv.v_cache);
    const int64_t d = kv.head_dim, bs = kv.block_size;
    KeyWalk key(j0, bs);
    for (int64_t j = 0; j < n; ++j) {
        const int64_t hr = key.head_row(kv);
        const T* kr = k_cache + hr * d;
        const T* vr = v_cache + hr * d;
        __m512 ks = _mm512_set1_ps(1.0f), vs = ks;
        if (kScaled) {
            ks = _mm512_set1_ps(kv.k_scale[hr] * kE4m3Unit);
            vs = _mm512_set1_ps(kv.v_scale[hr] * kE4m3Unit);
        }
        for (int64_t x = 0; x < d; x += 16) {
            __m512 vx = widen16(vr + x), kx = widen16(kr + x);
            if (kScaled) {
                vx = _mm512_mul_ps(vx, vs);
                kx = _mm512_mul_ps(kx, ks);
            }
            _mm512_store_ps(vf + j * d + x, vx);
            _mm512_store_ps(kf + j * d + x, kx);
        }
        key.next(bs);
    }
}

// st[j][0, kR) = qt^T kf[j] for j < n (the softmax scale is folded into qt).
void tile_scores(const float* qt, const float* kf, int64_t d, int64_t n, float* st) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512 a0[8], a1[8];
        for (int u = 0; u < 8; ++u) a0[u] = a1[u] = _mm512_setzero_ps();
        for (int64_t x = 0; x < d; ++x) {
            const __m512 q0 = _mm512_load_ps(qt + x * kR), q1 = _mm512_load_ps(qt + x * kR + 16);
#pragma GCC unroll 8
            for (int u = 0; u < 8; ++u) {
                const __m512 b = _mm512_set1_ps(kf[(j + u) * d + x]);
                a0[u] = _mm512_fmadd_ps(q0, b, a0[u]);
                a1[u] = _mm512_fmadd_ps(q1, b, a1[u]);
            }
        }
        for (int u = 0; u < 8; ++u) {
            _mm512_store_ps(st + (j + u) * kR, a0[u]);
            _mm512_store_ps(st + (j + u) * kR + 16, a1[u]);
        }
    }
    for (; j < n; ++j) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        for (int64_t x = 0; x < d; ++x) {
            const __m512 b = _mm512_set1_ps(kf[j * d + x]);
            a0 = _mm512_fmadd_ps(_mm512_load_ps(qt + x * kR), b, a0);
            a1 = _mm512_fmadd_ps(_mm512_load_ps(qt + x * kR + 16), b, a1);
        }
        _mm512_store_ps(st + j * kR, a0);
        _mm512_store_ps(st + j * kR + 16, a1);
    }
}

// The online softmax of one tile, per row: keys past a row's position or before its window masked
// out (when `masked`), m_new = max(m, tile max), st = exp(st - m_new), alpha = exp(m - m_new),
// l = l alpha + sum st.
void tile_softmax(float* st, int64_t n, int64_t j0, bool masked, const Scratch& s) {
    for (int64_t h = 0; h < kR; h += 16) {
        const __m512i pos = _mm512_load_si512(s.pos + h), lo = _mm512_load_si512(s.lo + h);
        __m512 mt = _mm512_set1_ps(-__builtin_inff());
        for (int64_t j = 0; j < n; ++j) {
            __m512 v = _mm512_load_ps(st + j * kR + h);
            if (masked) {
                const __m512i key = _mm512_set1_epi32(int32_t(j0 + j));
                const __mmask16 hidden = _mm512_cmpgt_epi32_mask(key, pos) | _mm512_cmplt_epi32_mask(key, lo);
                v = _mm512_mask_mov_ps(v, hidden, _mm512_set1_ps(-__builtin_inff()));
                _mm512_store_ps(st + j * kR + h, v);
            }
            mt = _mm512_max_ps(mt, v);
        }
        const __m512 m_old = _mm512_load_ps(s.m + h), m_new = _mm512_max_ps(m_old, mt);
        // m_old - m_new: -inf on a segment's first tile (alpha 0). A row whose position is before
        // the segment sees none of its keys: m_new = -inf there, and exp16 maps the NaNs of
        // -inf - -inf to 0, so its state stays empty (l = 0, ot = 0).
        const __m512 alpha = exp16(_mm512_sub_ps(m_old, m_new));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; ++j) {
            const __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(st + j * kR + h), m_new));
            _mm512_store_ps(st + j * kR + h, e);
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_store_ps(s.m + h, m_new);
        _mm512_store_ps(s.alpha + h, alpha);
        _mm512_store_ps(s.l + h, _mm512_fmadd_ps(_mm512_load_ps(s.l + h), alpha, sum));
    }
}

// ot[x][0, kR) = ot[x] alpha + sum_j st[j] vf[j][x], for x < d (d a multiple of 8).
void tile_pv(const float* st, const float* vf, int64_t d, int64_t n, const float* alpha, float* ot) {
    const __m512 al0 = _mm512_load_ps(alpha), al1 = _mm512_load_ps(alpha + 16);
    for (int64_t x0 = 0; x0 < d; x0 += 8) {
        __m512 a0[8], a1[8];
        for (int u = 0; u < 8; ++u) {
            a0[u] = _mm512_mul_ps(_mm512_load_ps(ot + (x0 + u) * kR), al0);
            a1[u] = _mm512_mul_ps(_mm512_load_ps(ot + (x0 + u) * kR + 16), al1);
        }
        for (int64_t j = 0; j < n; ++j) {
            const __m512 p0 = _mm512_load_ps(st + j * kR), p1 = _mm512_load_ps(st + j * kR + 16);
#pragma GCC unroll 8
            for (int u = 0; u < 8; ++u) {
                const __m512 b = _mm512_set1_ps(vf[j * d + x0 + u]);
                a0[u] = _mm512_fmadd_ps(p0, b, a0[u]);
                a1[u] = _mm512_fmadd_ps(p1, b, a1[u]);
            }
        }
        for (int u = 0; u < 8; ++u) {
            _mm512_store_ps(ot + (x0 + u) * kR, a0[u]);
            _mm512_store_ps(ot + (x0 + u) * kR + 16, a1[u]);
        }
    }
}

// The keys a block reads start at the earliest window start of its rows (lo_min); tiles past the
// smallest position (first) or before the latest window start (lo_max) need the per-row masks.
struct BlockKeys {
    int64_t lo_min, lo_max, first;
};

// Transposes the rows' queries (times the softmax scale) into qt, padding rows past n with zeros
// at the last position (they then see every key the block reads), sets each row's window start,
// and empties the total.
BlockKeys begin_block(const FlashKvHead& kv, const FlashRows& rows, int64_t last, const Scratch& s) {
    const int64_t d = kv.head_dim;
    BlockKeys keys{last, 0, last};
    for (int64_t r = 0; r < kR; ++r) {
        const bool real = r < rows.n;
        s.pos[r] = int32_t(real ? rows.pos[r] : last);
        s.lo[r] = int32_t(window_start(kv.window, s.pos[r]));
        keys.lo_min = imin(keys.lo_min, s.lo[r]);
        keys.lo_max = imax(keys.lo_max, s.lo[r]);
        if (real) keys.first = imin(keys.first, rows.pos[r]);
        for (int64_t x = 0; x < d; ++x) s.qt[x * kR + r] = real ? rows.q[r][x] * kv.scale : 0.0f;
        s.total_m[r] = -__builtin_inff();
        s.total_l[r] = 0.0f;
    }
    for (int64_t i = 0; i < d * kR; i += 16) _mm512_store_ps(s.total_o + i, _mm512_setzero_ps());
    return keys;
}

// The first key tile a segment from k0 reads for rows whose windows start at lo_min or later:
// tiles before it hold no key of any row's window (a no-op for every row, see
// paged_attention_isa.h). Tiles stay aligned to kKeys, as in the other kernel.
inline int64_t first_tile(int64_t k0, int64_t lo_min) { return imax(k0, lo_min / kKeys * kKeys); }

// A fresh softmax state for the next segment.
void begin_segment(int64_t d, const Scratch& s) {
    for (int64_t r = 0; r < kR; ++r) {
        s.m[r] = -__builtin_inff();
        s.l[r] = 0.0f;
    }
    for (int64_t i = 0; i < d * kR; i += 16) _mm512_store_ps(s.ot + i, _mm512_setzero_ps());
}

// The segment's state merged into the total, lane-wise (merge_state).
void end_segment(int64_t d, const Scratch& s) {
    for (int64_t h = 0; h < kR; h += 16) {
        const MergeWeights w = merge_state(s.total_m + h, s.total_l + h, _mm512_load_ps(s.m + h),
                                           _mm512_load_ps(s.l + h), __mmask16(0xffff));
        for (int64_t x = 0; x < d; ++x) {
            float* o = s.total_o + x * kR + h;
            _mm512_store_ps(o, merge_output(_mm512_load_ps(o), _mm512_load_ps(s.ot + x * kR + h), w));
        }
    }
}

template <typename T, bool kScaled>
void attend(const FlashKvHead& kv, const FlashRows& rows) {
    const int64_t d = kv.head_dim;
    const Scratch s = make_scratch(d);
    int64_t last = 0;
    for (int64_t r = 0; r < rows.n; ++r) last = imax(last, rows.pos[r]);
    const BlockKeys keys = begin_block(kv, rows, last, s);
    for (int64_t k0 = keys.lo_min / kSegmentKeys * kSegmentKeys; k0 <= last; k0 += kSegmentKeys) {
        const int64_t k1 = imin(k0 + kSegmentKeys, last + 1);
        begin_segment(d, s);
        for (int64_t j0 = first_tile(k0, keys.lo_min); j0 < k1; j0 += kKeys) {
            const int64_t n = imin(kKeys, k1 - j0);
            load_tile<T, kScaled>(kv, j0, n, s.kf, s.vf);
            tile_scores(s.qt, s.kf, d, n, s.st);
            tile_softmax(s.st, n, j0, j0 + n - 1 > keys.first || j0 < keys.lo_max, s);
            tile_pv(s.st, s.vf, d, n, s.alpha, s.ot);
        }
        end_segment(d, s);
    }
    for (int64_t r = 0; r < rows.n; ++r) {
        const float l = s.total_l[r] + __builtin_expf(rows.sink[r] - s.total_m[r]);  // the sink: no value row
        const float inv = 1.0f / l;
        for (int64_t x = 0; x < d; ++x) rows.out[r][x] = s.total_o[x * kR + r] * inv;
        if (rows.lse[r] != nullptr) *rows.lse[r] = s.total_m[r] + __builtin_logf(l);
    }
}

// ---- Decode: a few rows per kv head (the GQA heads of one token), keys as the vector lanes. ----
// Every operation a row goes through is the flash block's, in the same order, so a row's output
// has the same bits whichever of the two kernels computes it (and whatever else is in its
// batch): the segments of kSegmentKeys keys, each from a fresh state and merged in key order
// (merge_state); within one, the score of key j is the chain fma(q[x] * scale, k[j][x], .) over
// x = 0, 1, ...; tiles of kKeys keys; the tile's sum of weights in key order;
// l = fma(l, alpha, sum); the output rescaled by alpha and then fma(p[j], v[j][x], .) over j.
// Only the layout differs: the tile's widened K rows are transposed in registers
// (kt [head_dim][kKeys]) so that 16 keys are one zmm. One call covers every kv head of the rows,
// tile by tile, so the cache blocks (all heads of a key are adjacent) are read in one pass.

// The 16 lanes of keys [base, base + 16) of a tile that lie in [from, to).
inline __mmask16 lanes_between(int64_t base, int64_t from, int64_t to) {
    const int64_t a = imin(imax(from - base, 0), 16), b = imin(imax(to - base, 0), 16);
    const uint32_t below_b = b >= 16 ? 0xffffu : (1u << b) - 1, below_a = a >= 16 ? 0xffffu : (1u << a) - 1;
    return __mmask16(below_b & ~below_a);
}

// The online softmax of one row over one tile, but for its sum: scores sc[0..1] (keys 0-15,
// 16-31), of which keys [from, to) count. Writes the weights to p [kKeys], updates m and returns
// alpha; decode_head_tile adds the weights up and updates l (decode_sums).
inline float decode_weights(__m512 sc0, __m512 sc1, int64_t from, int64_t to, float* p, float& m) {
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    sc0 = _mm512_mask_mov_ps(ninf, lanes_between(0, from, to), sc0);
    sc1 = _mm512_mask_mov_ps(ninf, lanes_between(16, from, to), sc1);
    const float mt = _mm512_reduce_max_ps(_mm512_max_ps(sc0, sc1));
    const float m_new = m > mt ? m : mt;
    const __m512 mv = _mm512_set1_ps(m_new);
    const float alpha = _mm_cvtss_f32(_mm512_castps512_ps128(exp16(_mm512_set1_ps(m - m_new))));
    _mm512_store_ps(p, exp16(_mm512_sub_ps(sc0, mv)));
    _mm512_store_ps(p + 16, exp16(_mm512_sub_ps(sc1, mv)));
    m = m_new;
    return alpha;
}

// l[r] = fma(l[r], alpha[r], sum of p[r] in key order) for the NQ rows, as the flash block adds a
// tile's weights. The rows' sums run side by side: one row's chain of kKeys dependent adds alone
// cost as much as the tile's FMAs. A row the tile skipped has p = 0 and alpha = 1: l stays.
template <int NQ>
inline void decode_sums(const float* p, const float* alpha, float* l) {
    float sum[NQ];
    for (int r = 0; r < NQ; ++r) sum[r] = 0.0f;
    for (int64_t j = 0; j < kKeys; ++j) {
#pragma GCC unroll 8
        for (int r = 0; r < NQ; ++r) sum[r] += p[r * kKeys + j];
    }
    for (int r = 0; r < NQ; ++r) {
        l[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(l[r]), _mm_set_ss(alpha[r]), _mm_set_ss(sum[r])));
    }
}

// Floats of decode_segment's work buffer for `rows` rows: qs [rows][d], kt [d][kKeys],
// p [kDecodeRows][kKeys], then the rows' window starts as int64 [rows].
inline int64_t decode_work_floats(int64_t rows, int64_t d) {
    return rows * d + kKeys * d + kDecodeRows * kKeys + 2 * rows;
}

// One tile of one kv head as the decode kernel reads it: its keys' cache rows, and for fp8 their
// scales (times kE4m3Unit). V is widened in registers as the PV products read it, and K
// transposed into kt once per tile: storing the widened V rows only to load them again cost
// about a fifth of the kernel (attention_bench EngineLayout, 4096 keys: 192 us a layer with them
// stored, 157-164 without).
template <typename T>
struct DecodeTile {
    const T* k[kKeys];
    const T* v[kKeys];
    float k_scale[kKeys], v_scale[kKeys];
};

// t = the rows of keys j0 + j, j < n, and kt [d][kKeys] their K rows transposed. The next tile's
// rows of this kv head are prefetched into L2: decode does little work per byte, and waits on
// memory without it; into L1 they evicted the tiles of the kv heads between (attention_bench
// EngineLayout, 4096 keys: 222 us a layer into L1, 181 into L2).
template <typename T, bool kScaled>
void decode_tile(const FlashKvHead& kv, int64_t j0, int64_t n, int64_t last, DecodeTile<T>& t, float* kt) {
    const T* k_cache = static_cast<const T*>(kv.k_cache);
    const T* v_cache = static_cast<const T*>(kv.v_cache);
    const int64_t d = kv.head_dim, bs = kv.block_size;
    KeyWalk key(j0, bs), ahead(j0 + kKeys, bs);  // this tile's keys, and the next tile's
    const int64_t ahead_n = imin(n, last + 1 - (j0 + kKeys));
    for (int64_t j = 0; j < n; ++j) {
        const int64_t hr = key.head_row(kv);
        t.k[j] = k_cache + hr * d;
        t.v[j] = v_cache + hr * d;
        if (kScaled) {
            t.k_scale[j] = kv.k_scale[hr] * kE4m3Unit;
            t.v_scale[j] = kv.v_scale[hr] * kE4m3Unit;
        }
        if (j < ahead_n) {
            const int64_t hn = ahead.head_row(kv);
            for (int64_t x = 0; x < d; x += 64 / int64_t{sizeof(T)}) {
                _mm_prefetch(reinterpret_cast<const char*>(k_cache + hn * d + x), _MM_HINT_T1);
                _mm_prefetch(reinterpret_cast<const char*>(v_cache + hn * d + x), _MM_HINT_T1);
            }
        }
        key.next(bs);
        ahead.next(bs);
    }
    if constexpr (sizeof(T) == 2) {
        transpose_k_pairs(t.k, d, n, kt);
    } else {
        transpose_k_rows<T, kScaled>(t.k, t.k_scale, d, n, kt);
    }
}

// The scores of NQ rows for the tile's 32 keys, sc [NQ][2] (keys 0-15, 16-31): each row's chain
// over x as the flash block runs it, the rows' chains interleaved so that they hide each other's
// FMA latency (one row alone would wait on every FMA), kt loaded once for all rows.
template <int NQ>
void decode_scores(const float* qs, int64_t d, const float* kt, __m512* sc) {
    __m512 acc[2 * NQ];
#pragma GCC unroll 16
    for (int i = 0; i < 2 * NQ; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t x = 0; x < d; ++x) {
        const __m512 k0 = _mm512_load_ps(kt + x * kKeys), k1 = _mm512_load_ps(kt + x * kKeys + 16);
#pragma GCC unroll 8
        for (int r = 0; r < NQ; ++r) {
            const __m512 qx = _mm512_set1_ps(qs[r * d + x]);
            acc[2 * r] = _mm512_fmadd_ps(qx, k0, acc[2 * r]);
            acc[2 * r + 1] = _mm512_fmadd_ps(qx, k1, acc[2 * r + 1]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < 2 * NQ; ++i) sc[i] = acc[i];
}

// o[r][x0, x0 + 16 * W) = o alpha[r] + sum_j p[r][j] v[j][...], for NQ rows: W vectors of 16 at
// once, so that NQ * W chains (each over j in order) are in flight. V is widened (and scaled) as
// the flash block's load_tile widens it.
template <typename T, bool kScaled, int NQ, int W>
void decode_pv(const float* p, const DecodeTile<T>& t, int64_t d, int64_t n, const float* alpha, float* o, int64_t x0) {
    __m512 a[NQ * W];
#pragma GCC unroll 16
    for (int r = 0; r < NQ; ++r) {
        for (int w = 0; w < W; ++w) {
            a[r * W + w] = _mm512_mul_ps(_mm512_loadu_ps(o + r * d + x0 + 16 * w), _mm512_set1_ps(alpha[r]));
        }
    }
    for (int64_t j = 0; j < n; ++j) {
        __m512 v[W];
#pragma GCC unroll 2
        for (int w = 0; w < W; ++w) {
            v[w] = widen16(t.v[j] + x0 + 16 * w);
            if (kScaled) v[w] = _mm512_mul_ps(v[w], _mm512_set1_ps(t.v_scale[j]));
        }
#pragma GCC unroll 8
        for (int r = 0; r < NQ; ++r) {
            const __m512 pr = _mm512_set1_ps(p[r * kKeys + j]);
#pragma GCC unroll 2
            for (int w = 0; w < W; ++w) a[r * W + w] = _mm512_fmadd_ps(pr, v[w], a[r * W + w]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < NQ; ++r) {
        for (int w = 0; w < W; ++w) _mm512_storeu_ps(o + r * d + x0 + 16 * w, a[r * W + w]);
    }
}

// The NQ rows of one kv head over one tile (keys j0 .. j0 + n - 1: t, with K transposed into kt):
// their scores and softmax, then the value rows read once for all of them. o, m, l: the head's
// rows; lo: their window starts.
template <typename T, bool kScaled, int NQ>
void decode_head_tile(const float* qs, const int64_t* pos, const int64_t* lo, int64_t d, int64_t j0, int64_t n,
                      const float* kt, const DecodeTile<T>& t, float* p, float* o, float* m, float* l) {
    float alpha[NQ];
    __m512 sc[2 * NQ];
    decode_scores<NQ>(qs, d, kt, sc);
    for (int r = 0; r < NQ; ++r) {
        if (pos[r] < j0 || lo[r] >= j0 + n) {  // the tile is past the row or before its window
            alpha[r] = 1.0f;
            for (int64_t j = 0; j < kKeys; j += 16) _mm512_store_ps(p + r * kKeys + j, _mm512_setzero_ps());
            continue;
        }
        alpha[r] = decode_weights(sc[2 * r], sc[2 * r + 1], lo[r] - j0, imin(n, pos[r] + 1 - j0), p + r * kKeys, m[r]);
    }
    decode_sums<NQ>(p, alpha, l);
    int64_t x = 0;
    for (; x + 32 <= d; x += 32) decode_pv<T, kScaled, NQ, 2>(p, t, d, n, alpha, o, x);
    if (x < d) decode_pv<T, kScaled, NQ, 1>(p, t, d, n, alpha, o, x);
}

template <typename T>
using DecodeHeadTile = void (*)(const float*, const int64_t*, const int64_t*, int64_t, int64_t, int64_t, const float*,
                                const DecodeTile<T>&, float*, float*, float*, float*);
template <typename T, bool kScaled>
constexpr DecodeHeadTile<T> kDecodeHeadTile[kDecodeRows] = {
    decode_head_tile<T, kScaled, 1>, decode_head_tile<T, kScaled, 2>, decode_head_tile<T, kScaled, 3>,
    decode_head_tile<T, kScaled, 4>, decode_head_tile<T, kScaled, 5>, decode_head_tile<T, kScaled, 6>,
    decode_head_tile<T, kScaled, 7>, decode_head_tile<T, kScaled, 8>};

// The rows over segment `segment` into out (FlashDecodeRows, FlashPartial), work from
// decode_work_floats.
template <typename T, bool kScaled>
void decode_segment(const FlashKvHead& kv, const FlashDecodeRows& rows, int64_t segment, const FlashPartial& out,
                    float* work) {
    const int64_t d = kv.head_dim, per = rows.rows_per_head, nr = rows.num_kv_heads * per;
    float *qs = work, *kt = qs + nr * d, *p = kt + kKeys * d;
    auto* lo = reinterpret_cast<int64_t*>(p + kDecodeRows * kKeys);
    int64_t last = 0, lo_min = rows.pos[0];
    for (int64_t r = 0; r < nr; ++r) {
        last = imax(last, rows.pos[r]);
        lo[r] = window_start(kv.window, rows.pos[r]);
        lo_min = imin(lo_min, lo[r]);
        for (int64_t x = 0; x < d; ++x) {
            qs[r * d + x] = rows.q[r][x] * kv.scale;
            out.o[r * d + x] = 0.0f;
        }
        out.m[r] = -__builtin_inff();
        out.l[r] = 0.0f;
    }
    const int64_t k0 = segment * kSegmentKeys, k1 = imin(k0 + kSegmentKeys, last + 1);
    FlashKvHead head = kv;
    DecodeTile<T> tile;
    for (int64_t j0 = first_tile(k0, lo_min); j0 < k1; j0 += kKeys) {
        const int64_t n = imin(kKeys, k1 - j0);
        for (int64_t h = 0; h < rows.num_kv_heads; ++h) {
            head.kv_head = kv.kv_head + h;
            decode_tile<T, kScaled>(head, j0, n, last, tile, kt);
            const int64_t r0 = h * per;
            kDecodeHeadTile<T, kScaled>[per - 1](qs + r0 * d, rows.pos + r0, lo + r0, d, j0, n, kt, tile, p,
                                                 out.o + r0 * d, out.m + r0, out.l + r0);
        }
    }
}

template <typename T, bool kScaled>
void run_decode_segment(const FlashKvHead& kv, const FlashDecodeRows& rows, int64_t segment, const FlashPartial& out) {
    const int64_t nr = rows.num_kv_heads * rows.rows_per_head;
    auto* work = static_cast<float*>(thread_scratch(kAttentionSlot, decode_work_floats(nr, kv.head_dim) * 4));
    decode_segment<T, kScaled>(kv, rows, segment, out, work);
}

// Up to kDecodeRows rows of one kv head (a flash block's call with few rows): every segment in
// turn, merged as the flash block merges them.
template <typename T, bool kScaled>
void attend_decode(const FlashKvHead& kv, const FlashRows& rows) {
    const int64_t d = kv.head_dim, nq = rows.n;
    // work, then the segment's and the total's o [kDecodeRows][d], m and l [kDecodeRows]
    const int64_t state = kDecodeRows * d + 2 * kDecodeRows;
    auto* b = static_cast<float*>(thread_scratch(kAttentionSlot, (decode_work_floats(nq, d) + 16 + 2 * state) * 4));
    float* seg_base = b + (decode_work_floats(nq, d) + 15) / 16 * 16;
    const FlashPartial seg{seg_base, seg_base + kDecodeRows * d, seg_base + kDecodeRows * d + kDecodeRows};
    float* tot_base = seg_base + state;
    const FlashPartial total{tot_base, tot_base + kDecodeRows * d, tot_base + kDecodeRows * d + kDecodeRows};
    int64_t pos[kDecodeRows];
    int64_t last = 0;
    for (int64_t r = 0; r < nq; ++r) {
        pos[r] = rows.pos[r];
        last = imax(last, pos[r]);
        total.m[r] = -__builtin_inff();
        total.l[r] = 0.0f;
        for (int64_t x = 0; x < d; ++x) total.o[r * d + x] = 0.0f;
    }
    int64_t lo_min = last;
    for (int64_t r = 0; r < nq; ++r) lo_min = imin(lo_min, window_start(kv.window, pos[r]));
    const FlashDecodeRows drows{1, nq, rows.q, pos};
    for (int64_t segment = lo_min / kSegmentKeys; segment * kSegmentKeys <= last; ++segment) {
        decode_segment<T, kScaled>(kv, drows, segment, seg, b);
        flash_merge_avx512(total, seg, nq, d);
    }
    flash_finish_avx512(total, nq, d, rows.out, rows.lse, rows.sink);
}

template <typename T, bool kScaled>
void attend_rows(const FlashKvHead& kv, const FlashRows& rows) {
    if (rows.n > kDecodeRows) {
        attend<T, kScaled>(kv, rows);
        return;
    }
    attend_decode<T, kScaled>(kv, rows);
}

}  // namespace

void flash_merge_avx512(const FlashPartial& total, const FlashPartial& next, int64_t rows, int64_t head_dim) {
    for (int64_t r = 0; r < rows; ++r) {
        const MergeWeights w =
            merge_state(total.m + r, total.l + r, _mm512_set1_ps(next.m[r]), _mm512_set1_ps(next.l[r]), __mmask16(1));
        const __m512 a = _mm512_set1_ps(_mm512_cvtss_f32(w.a)), b = _mm512_set1_ps(_mm512_cvtss_f32(w.b));
        for (int64_t x = 0; x < head_dim; x += 16) {
            float* o = total.o + r * head_dim + x;
            _mm512_storeu_ps(o, merge_output(_mm512_loadu_ps(o), _mm512_loadu_ps(next.o + r * head_dim + x), {a, b}));
        }
    }
}

void flash_finish_avx512(const FlashPartial& total, int64_t rows, int64_t head_dim, float* const* out,
                         float* const* lse, const float* sink) {
    for (int64_t r = 0; r < rows; ++r) {
        const float l = total.l[r] + __builtin_expf(sink[r] - total.m[r]);
        const __m512 inv = _mm512_set1_ps(1.0f / l);
        for (int64_t x = 0; x < head_dim; x += 16) {
            _mm512_storeu_ps(out[r] + x, _mm512_mul_ps(_mm512_loadu_ps(total.o + r * head_dim + x), inv));
        }
        if (lse[r] != nullptr) *lse[r] = total.m[r] + __builtin_logf(l);
    }
}

void flash_decode_segment_avx512(const FlashKvHead& kv, const FlashDecodeRows& rows, int64_t segment,
                                 const FlashPartial& out) {
    switch (kv.cache_kind) {
        case 1:
            run_decode_segment<uint16_t, false>(kv, rows, segment, out);
            break;
        case 2:
            run_decode_segment<uint8_t, true>(kv, rows, segment, out);
            break;
        default:
            run_decode_segment<float, false>(kv, rows, segment, out);
            break;
    }
}

void flash_attend_avx512(const FlashKvHead& kv, const FlashRows& rows) {
    switch (kv.cache_kind) {
        case 1:
            attend_rows<uint16_t, false>(kv, rows);
            break;
        case 2:
            attend_rows<uint8_t, true>(kv, rows);
            break;
        default:
            attend_rows<float, false>(kv, rows);
            break;
    }
}

}  // namespace moeserve::kernels::cpu::detail
