#include "moeserve/kernels/cpu/sample.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moeserve::kernels::cpu {

int32_t argmax_ref(const float* values, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i) {
        if (values[i] > values[best]) best = i;
    }
    return static_cast<int32_t>(best);
}

// AVX2: 4 x 8 lanes each keep their running maximum and its first index (strictly greater
// replaces, so each lane holds its lowest index among equal maxima); the lanes are reduced by
// (value, then lowest index). Lanes start at values[0] / index 0, so NaNs never win, exactly as
// in the scalar loop (which also returns 0 when values[0] is NaN).
int32_t argmax(const float* values, int64_t n) {
    if (n < 64 || values[0] != values[0]) return argmax_ref(values, n);
    const __m256 first = _mm256_set1_ps(values[0]);
    __m256 best_v[4] = {first, first, first, first};
    __m256i best_i[4];
    for (auto& b : best_i) b = _mm256_setzero_si256();
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i idx[4];
    for (int u = 0; u < 4; ++u) idx[u] = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * u));
    const __m256i step32 = _mm256_set1_epi32(32);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
            const __m256 v = _mm256_loadu_ps(values + i + 8 * u);
            const __m256 gt = _mm256_cmp_ps(v, best_v[u], _CMP_GT_OQ);
            best_v[u] = _mm256_blendv_ps(best_v[u], v, gt);
            best_i[u] = _mm256_blendv_epi8(best_i[u], idx[u], _mm256_castps_si256(gt));
            idx[u] = _mm256_add_epi32(idx[u], step32);
        }
    }
    alignas(32) float lv[32];
    alignas(32) int32_t li[32];
    for (int u = 0; u < 4; ++u) {
        _mm256_store_ps(lv + 8 * u, best_v[u]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(li + 8 * u), best_i[u]);
    }
    float bv = lv[0];
    int64_t bi = li[0];
    for (int j = 1; j < 32; ++j) {
        if (lv[j] > bv || (lv[j] == bv && li[j] < bi)) {
            bv = lv[j];
            bi = li[j];
        }
    }
    for (; i < n; ++i) {
        if (values[i] > bv) {
            bv = values[i];
            bi = i;
        }
    }
    return static_cast<int32_t>(bi);
}

namespace {

// Orders ids[0, n) so that the first m are the m largest logits, descending (ties: lower id).
void top_m(const float* logits, std::vector<int32_t>& ids, size_t m) {
    const auto by_logit = [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    m = std::min(m, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(m), ids.end(), by_logit);
}

}  // namespace

int32_t sample_token(const float* logits, int64_t vocab, const SamplingSettings& s, Rng& rng, SampleScratch& scratch) {
    if (s.temperature <= 0.0f || s.top_k == 1) return argmax(logits, vocab);
    auto& ids = scratch.ids;
    auto& probs = scratch.probs;
    const auto v = static_cast<size_t>(vocab);
    const float max_logit = logits[argmax(logits, vocab)];
    const float inv_t = 1.0f / s.temperature;
    // 1. unnormalized probabilities of every token and their total (the softmax denominator)
    probs.resize(v);
    double total = 0;
    for (size_t i = 0; i < v; ++i) {
        probs[i] = std::exp((logits[i] - max_logit) * inv_t);
        total += probs[i];
    }
    const bool truncate = (s.top_k > 0 && static_cast<size_t>(s.top_k) < v) || s.top_p < 1.0f || s.min_p > 0.0f;
    if (!truncate) {  // plain sampling: no ordering needed
        double u = rng.uniform_double() * total;
        for (size_t i = 0; i < v; ++i) {
            u -= probs[i];
            if (u < 0) return static_cast<int32_t>(i);
        }
        return static_cast<int32_t>(v - 1);
    }
    // 2. candidates in descending order: the top_k, or enough of the head to cover top_p
    ids.resize(v);
    std::iota(ids.begin(), ids.end(), 0);
    size_t n = s.top_k > 0 ? std::min(v, static_cast<size_t>(s.top_k)) : v;
    size_t sorted = std::min<size_t>(n, 64);
    top_m(logits, ids, sorted);
    for (;;) {
        double head = 0;
        for (size_t i = 0; i < sorted; ++i) head += probs[static_cast<size_t>(ids[i])];
        if (sorted == n || head / total >= s.top_p) break;
        sorted = std::min(n, sorted * 4);
        top_m(logits, ids, sorted);
    }
    // 3. restrict to top_k, then min_p, then top_p (the first candidate always stays)
    double candidates_total = 0;
    if (n == v) {
        candidates_total = total;
    } else {
        for (size_t i = 0; i < n; ++i) candidates_total += probs[static_cast<size_t>(ids[i])];
    }
    size_t keep = sorted;
    if (s.min_p > 0.0f) {
        const float floor = s.min_p * probs[static_cast<size_t>(ids[0])];
        keep = 1;
        while (keep < sorted && probs[static_cast<size_t>(ids[keep])] >= floor) ++keep;
    }
    if (s.top_p < 1.0f) {
        double cumulative = 0;
        for (size_t i = 0; i < keep; ++i) {
            cumulative += probs[static_cast<size_t>(ids[i])] / candidates_total;
            if (cumulative >= s.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double kept_total = 0;
    for (size_t i = 0; i < keep; ++i) kept_total += probs[static_cast<size_t>(ids[i])];
    // 4. draw
    double u = rng.uniform_double() * kept_total;
    for (size_t i = 0; i < keep; ++i) {
        u -= probs[static_cast<size_t>(ids[i])];
        if (u < 0) return ids[i];
    }
    return ids[keep - 1];
}

}  // namespace moeserve::kernels::cpu
