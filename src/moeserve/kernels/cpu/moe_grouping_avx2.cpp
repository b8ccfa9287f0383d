#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moeserve/kernels/cpu/moe_grouping.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu::detail {

MoeGroups group_slots_by_expert(const int32_t* topk_ids, int64_t num_tokens, int k, int64_t expert_begin, int64_t num_e,
                                MoeScratch& s) {
    const int64_t num_slots = num_tokens * k;
    MoeGroups g;
    s.offsets.assign(size_t(2 * num_e + 1), 0);
    s.slot_index.assign(size_t(num_slots), -1);
    for (int64_t a = 0; a < num_slots; ++a) {
        const int64_t e = int64_t{topk_ids[a]} - expert_begin;
        if (e >= 0 && e < num_e) s.offsets[size_t(e + 1)]++;
    }
    for (int64_t e = 0; e < num_e; ++e) {
        const int32_t c = s.offsets[size_t(e + 1)];
        if (c > 0) s.offsets[size_t(num_e + 1 + g.num_active++)] = int32_t(e);
        g.max_count = std::max<int64_t>(g.max_count, c);
        s.offsets[size_t(e + 1)] += s.offsets[size_t(e)];
    }
    g.total = s.offsets[size_t(num_e)];
    s.token_index.resize(size_t(g.total));
    std::vector<int32_t>& off = s.offsets;  // off[e] serves as a fill cursor, then is restored
    for (int64_t a = 0; a < num_slots; ++a) {
        const int64_t e = int64_t{topk_ids[a]} - expert_begin;
        if (e < 0 || e >= num_e) continue;
        const int32_t pos = off[size_t(e)]++;
        s.token_index[size_t(pos)] = int32_t(a / k);
        s.slot_index[size_t(a)] = pos;
    }
    for (int64_t e = num_e; e > 0; --e) off[size_t(e)] = off[size_t(e - 1)];
    off[0] = 0;
    return g;
}

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

void glu_span(const ExpertGlu& glu, int64_t e, int64_t inter, int64_t r0, const float* g, const float* u, int64_t n,
              float* out) {
    if (glu.is_swiglu()) {
        silu_mul_span(g, u, n, out);
        return;
    }
    for (int64_t i = 0; i < n; ++i) out[i] = glu.apply(e, inter, r0 + i, g[i], u[i]);
}

void combine_expert_outputs(ThreadPool& pool, const MoeScratch& s, const float* topk_weights, int64_t num_tokens, int k,
                            int64_t h, float* out) {
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

}  // namespace moeserve::kernels::cpu::detail
