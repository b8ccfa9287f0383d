// Grouped W8A8 MoE experts, the structure of moe_experts_avx2.cpp with int8 tiles:
//   0: counting sort of (token, slot) by local expert; quantize each token once (per token scale)
//      into the grouped order
//   A: items (expert, 64 rows of gate and of up) -> SwiGLU in f32 -> act
//   A': quantize each act row (one scale per (token, expert))
//   B: items (expert, 128 rows of down) -> down_out
//   C: out[t] = sum_j weight[t, j] * down_out[pos(t, j)], in slot order (deterministic).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/moe_experts_int8.h"
#include "moeserve/kernels/cpu/quantize_int8.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu {
namespace {

constexpr int64_t kInterBlock = 64;
constexpr int64_t kHiddenBlock = 128;

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

template <typename F>
void run_items(ThreadPool& pool, int64_t num_items, F&& item) {
    if (num_items <= 0) return;
    std::atomic<int64_t> next{0};
    pool.run([&](int) {
        for (int64_t i = next.fetch_add(1); i < num_items; i = next.fetch_add(1)) item(i);
    });
}

}  // namespace

void moe_experts_int8(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const MoeExpertsInt8& ex, MoeScratch& s, MoeInt8Scratch& q,
                      float* out) {
    const int64_t num_e = ex.num_experts, h = ex.hidden, inter = ex.inter;
    const int64_t num_slots = num_tokens * k;
    const int64_t ldh = int8_padded_cols(h), ldi = int8_padded_cols(inter);
    // 1. Counting sort of the slots by local expert: offsets [num_e + 1], then the active experts.
    s.offsets.assign(size_t(2 * num_e + 1), 0);
    s.slot_index.assign(size_t(num_slots), -1);
    for (int64_t a = 0; a < num_slots; ++a) {
        const int64_t e = int64_t{topk_ids[a]} - ex.expert_begin;
        if (e >= 0 && e < num_e) s.offsets[size_t(e + 1)]++;
    }
    int64_t num_active = 0;
    for (int64_t e = 0; e < num_e; ++e) {
        const int32_t c = s.offsets[size_t(e + 1)];
        if (c > 0) s.offsets[size_t(num_e + 1 + num_active++)] = int32_t(e);
        s.offsets[size_t(e + 1)] += s.offsets[size_t(e)];
    }
    const int64_t total = s.offsets[size_t(num_e)];
    s.token_index.resize(size_t(total));
    {
        std::vector<int32_t>& off = s.offsets;
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
    s.gate_up.resize(size_t(total * 2 * inter));
    s.act.resize(size_t(total * inter));
    s.down_out.resize(size_t(total * h));
    q.qx.resize(size_t(num_tokens * ldh));
    q.sx.resize(size_t(num_tokens));
    q.qact.resize(size_t(total * ldi));

    // 2. Quantize every token once (not once per chosen expert), gather the int8 rows.
    auto quant_tokens = [&](int64_t t0, int64_t t1) {
        quantize_rows_int8(x + t0 * h, h, t1 - t0, h, q.qx.data() + t0 * ldh, ldh, q.sx.data() + t0);
    };
    if (num_tokens >= 16 && pool.num_threads() > 1) {
        pool.parallel_for(num_tokens, quant_tokens);
    } else {
        quant_tokens(0, num_tokens);
    }
    s.gathered.resize(size_t((total * ldh + 3) / 4));  // int8 [total, ldh] in the f32 buffer
    auto* gathered = reinterpret_cast<int8_t*>(s.gathered.data());
    q.sact.resize(size_t(2 * total));  // [0, total): act scales; [total, 2 total): gathered token scales
    float* pos_sx = q.sact.data() + total;
    for (int64_t pos = 0; pos < total; ++pos) {
        const int64_t t = s.token_index[size_t(pos)];
        std::memcpy(gathered + pos * ldh, q.qx.data() + t * ldh, size_t(ldh));
        pos_sx[pos] = q.sx[size_t(t)];
    }

    // 3. Phase A: gate|up + SwiGLU, items (active expert, inter block).
    const int64_t a_blocks = (inter + kInterBlock - 1) / kInterBlock;
    run_items(pool, num_active * a_blocks, [&](int64_t item) {
        const int64_t e = active[item / a_blocks];
        const int64_t r0 = (item % a_blocks) * kInterBlock, rb = std::min(kInterBlock, inter - r0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        const int8_t* gu = ex.gate_up + e * 2 * inter * h;
        const float* gus = ex.gate_up_scale + e * 2 * inter;
        const int8_t* xs = gathered + off * ldh;
        float* g = s.gate_up.data() + off * 2 * inter;
        detail::matmul_tile_int8(xs, ldh, pos_sx + off, cnt, h, gu + r0 * h, gus + r0, rb, g + r0, 2 * inter);
        detail::matmul_tile_int8(xs, ldh, pos_sx + off, cnt, h, gu + (inter + r0) * h, gus + inter + r0, rb,
                                 g + inter + r0, 2 * inter);
        for (int64_t i = 0; i < cnt; ++i) {
            silu_mul_span(g + i * 2 * inter + r0, g + i * 2 * inter + inter + r0, rb,
                          s.act.data() + (off + i) * inter + r0);
        }
    });

    // 4. Quantize each SwiGLU row (per token and expert).
    auto quant_act = [&](int64_t p0, int64_t p1) {
        quantize_rows_int8(s.act.data() + p0 * inter, inter, p1 - p0, inter, q.qact.data() + p0 * ldi, ldi,
                           q.sact.data() + p0);
    };
    if (total >= 16 && pool.num_threads() > 1) {
        pool.parallel_for(total, quant_act);
    } else {
        quant_act(0, total);
    }

    // 5. Phase B: down projection, items (active expert, hidden block).
    const int64_t b_blocks = (h + kHiddenBlock - 1) / kHiddenBlock;
    run_items(pool, num_active * b_blocks, [&](int64_t item) {
        const int64_t e = active[item / b_blocks];
        const int64_t h0 = (item % b_blocks) * kHiddenBlock, hb = std::min(kHiddenBlock, h - h0);
        const int64_t off = s.offsets[size_t(e)], cnt = s.offsets[size_t(e + 1)] - off;
        detail::matmul_tile_int8(q.qact.data() + off * ldi, ldi, q.sact.data() + off, cnt, inter,
                                 ex.down + (e * h + h0) * inter, ex.down_scale + e * h + h0, hb,
                                 s.down_out.data() + off * h + h0, h);
    });

    // 6. Weighted sum per token, in slot order.
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
