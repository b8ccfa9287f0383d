// Scalar references for the MLA kernels: one (token, head) at a time, full softmax in double.
#include <cmath>
#include <cstring>
#include <vector>

#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/mla_attention.h"

namespace moeserve::kernels::cpu {
namespace {
float weight_at(const MlaKvB& w, int64_t h, int64_t row, int64_t col) {
    const int64_t idx = (h * (w.nope_dim + w.v_dim) + row) * w.kv_lora_rank + col;
    return w.w_bf16 ? bf16_to_f32(w.w_bf16[idx]) : w.w_f32[idx];
}
// Element i of a latent cache of kv.dtype (fp8: times its row's latent or k_pe scale).
double cache_at(const PagedLatentLayer& kv, int64_t i) {
    if (kv.dtype == DType::kBF16) return double(bf16_to_f32(static_cast<const uint16_t*>(kv.cache)[i]));
    if (kv.dtype == DType::kF8E4M3) {
        const int64_t row = i / kv.row_dim(), part = i % kv.row_dim() < kv.kv_lora_rank ? 0 : 1;
        return double(f8e4m3_to_f32(static_cast<const uint8_t*>(kv.cache)[i])) * double(kv.scale[row * 2 + part]);
    }
    return double(static_cast<const float*>(kv.cache)[i]);
}
}  // namespace

void mla_attention_ref(const PagedLatentLayer& kv, const MlaAttentionArgs& a) {
    const int64_t dk = kv.row_dim(), dv = kv.kv_lora_rank;
    for (int64_t s = 0; s < a.num_seqs; ++s) {
        const int64_t q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0;
        const int32_t* table = a.block_tables + s * a.max_blocks_per_seq;
        for (int64_t i = 0; i < q_len; ++i) {
            const int64_t pos = a.causal ? a.seq_lens[s] - q_len + i : a.seq_lens[s] - 1;
            for (int64_t h = 0; h < a.num_heads; ++h) {
                const float* q = a.q + ((q0 + i) * a.num_heads + h) * dk;
                std::vector<double> p(static_cast<size_t>(pos + 1));
                double mx = -INFINITY;
                for (int64_t j = 0; j <= pos; ++j) {
                    const int64_t row = (int64_t{table[j / kv.block_size]} * kv.block_size + j % kv.block_size) * dk;
                    double dot = 0;
                    for (int64_t x = 0; x < dk; ++x) dot += double(q[x]) * cache_at(kv, row + x);
                    p[size_t(j)] = dot * a.scale;
                    mx = std::max(mx, p[size_t(j)]);
                }
                double sum = 0;
                for (auto& v : p) sum += v = std::exp(v - mx);
                if (a.lse) a.lse[(q0 + i) * a.num_heads + h] = float(mx + std::log(sum));
                float* out = a.out + ((q0 + i) * a.num_heads + h) * dv;
                for (int64_t x = 0; x < dv; ++x) {
                    double acc = 0;
                    for (int64_t j = 0; j <= pos; ++j) {
                        const int64_t row =
                            (int64_t{table[j / kv.block_size]} * kv.block_size + j % kv.block_size) * dk;
                        acc += p[size_t(j)] * cache_at(kv, row + x);
                    }
                    out[x] = static_cast<float>(acc / sum);
                }
            }
        }
    }
}

void mla_absorb_q_ref(const MlaKvB& w, const float* q, int64_t num_tokens, int64_t q_token_stride,
                      int64_t q_head_stride, float* out, int64_t out_token_stride, int64_t out_head_stride) {
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t h = 0; h < w.num_heads; ++h) {
            const float* qn = q + t * q_token_stride + h * q_head_stride;
            float* o = out + t * out_token_stride + h * out_head_stride;
            for (int64_t c = 0; c < w.kv_lora_rank; ++c) {
                double acc = 0;
                for (int64_t i = 0; i < w.nope_dim; ++i) acc += double(qn[i]) * weight_at(w, h, i, c);
                o[c] = static_cast<float>(acc);
            }
        }
    }
}

void mla_expand_v_ref(const MlaKvB& w, const float* latent, int64_t num_tokens, float* out) {
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t h = 0; h < w.num_heads; ++h) {
            const float* l = latent + (t * w.num_heads + h) * w.kv_lora_rank;
            for (int64_t j = 0; j < w.v_dim; ++j) {
                double acc = 0;
                for (int64_t c = 0; c < w.kv_lora_rank; ++c) acc += double(l[c]) * weight_at(w, h, w.nope_dim + j, c);
                out[(t * w.num_heads + h) * w.v_dim + j] = static_cast<float>(acc);
            }
        }
    }
}

}  // namespace moeserve::kernels::cpu
