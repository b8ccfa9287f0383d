// Scalar reference for paged_attention: per query and head, full softmax over the causal range
// (or its sliding window), with the head's sink in the denominator when there are sinks, in
// double, reading keys/values through the block table one position at a time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "moeserve/kernels/cpu/paged_attention.h"

namespace moeserve::kernels::cpu {
namespace {
// Element i of a cache (k or v, with its fp8 row scales) of kv.dtype as a double.
double cache_at(const PagedKvLayer& kv, const void* cache, const float* scales, int64_t i) {
    if (kv.dtype == DType::kBF16) return double(bf16_to_f32(static_cast<const uint16_t*>(cache)[i]));
    if (kv.dtype == DType::kF8E4M3) {
        return double(f8e4m3_to_f32(static_cast<const uint8_t*>(cache)[i])) * double(scales[i / kv.head_dim]);
    }
    return double(static_cast<const float*>(cache)[i]);
}
}  // namespace

void paged_attention_ref(const PagedKvLayer& kv, const PagedAttentionArgs& a) {
    const int64_t d = kv.head_dim, group = a.num_heads / kv.num_kv_heads;
    std::vector<double> sc;
    for (int64_t s = 0; s < a.num_seqs; ++s) {
        const int64_t q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
        const int32_t* table = a.block_tables + s * a.max_blocks_per_seq;
        for (int64_t i = 0; i < q_len; ++i) {
            const int64_t pos = a.seq_lens[s] - q_len + i;
            for (int64_t h = 0; h < a.num_heads; ++h) {
                const float* q = a.q + ((q0 + i) * a.num_heads + h) * d;
                const int64_t kvh = h / group;
                auto row = [&](int64_t p) {  // element offset of position p's row of head kvh
                    const int64_t slot = int64_t{table[p / kv.block_size]} * kv.block_size + p % kv.block_size;
                    return (slot * kv.num_kv_heads + kvh) * d;
                };
                const int64_t first = a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : 0;
                sc.assign(size_t(pos + 1 - first), 0.0);
                double mx = -INFINITY, sum = 0.0;
                for (int64_t p = first; p <= pos; ++p) {
                    const int64_t kr = row(p);
                    double dot = 0;
                    for (int64_t x = 0; x < d; ++x) dot += double(q[x]) * cache_at(kv, kv.k_cache, kv.k_scale, kr + x);
                    sc[size_t(p - first)] = dot * double(a.scale);
                    mx = std::max(mx, sc[size_t(p - first)]);
                }
                for (auto& v : sc) sum += v = std::exp(v - mx);
                if (a.sinks) sum += std::exp(double(a.sinks[h]) - mx);
                if (a.lse) a.lse[(q0 + i) * a.num_heads + h] = float(mx + std::log(sum));
                float* o = a.out + ((q0 + i) * a.num_heads + h) * d;
                for (int64_t x = 0; x < d; ++x) {
                    double acc = 0;
                    for (int64_t p = first; p <= pos; ++p)
                        acc += sc[size_t(p - first)] * cache_at(kv, kv.v_cache, kv.v_scale, row(p) + x);
                    o[x] = float(acc / sum);
                }
            }
        }
    }
}

}  // namespace moeserve::kernels::cpu
