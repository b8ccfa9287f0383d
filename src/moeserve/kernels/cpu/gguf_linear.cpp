#include "moeserve/kernels/cpu/gguf_linear.h"

#include <algorithm>
#include <cmath>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_dequant.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"

namespace moeserve::kernels::cpu {

namespace {

size_t row_bytes(GgmlType type, int64_t n) {
    const GgmlTypeTraits t = ggml_traits(type);
    return static_cast<size_t>(n / t.block_size) * t.type_size;
}

float dot_f32(const float* a, const float* b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

}  // namespace

void gguf_linear(ThreadPool& pool, const float* x, int64_t rows, const GgufMatrix& w, float* out,
                 GgufScratch& scratch) {
    const int64_t n = w.rows;
    const int64_t k = w.cols;
    if (rows <= 0 || n <= 0) return;
    const int threads = pool.num_threads();
    const int64_t chunk = (n + threads - 1) / threads;
    if (gguf_dot_supported(w.type)) {
        // 1. activations -> q8_0 / q8_K rows (llama.cpp's pairing); 2. integer dot per block
        const GgmlType act = gguf_dot_activation_type(w.type);
        const size_t qrow = row_bytes(act, k);
        scratch.qx.resize(qrow * static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) quantize_gguf(act, x + r * k, scratch.qx.data() + qrow * r, k);
        const uint8_t* qx = scratch.qx.data();
        pool.run([&](int tid) {
            const int64_t begin = tid * chunk;
            const int64_t end = std::min(n, begin + chunk);
            for (int64_t j = begin; j < end; ++j) {
                const uint8_t* wr = w.row(j);
                for (int64_t r = 0; r < rows; ++r) out[r * n + j] = gguf_vec_dot(w.type, k, wr, qx + qrow * r);
            }
        });
        return;
    }
    // no dot kernel: one dequantized weight row per thread at a time
    scratch.wrow.resize(static_cast<size_t>(threads * k));
    float* wrow_all = scratch.wrow.data();
    pool.run([&](int tid) {
        float* wrow = wrow_all + tid * k;
        const int64_t begin = tid * chunk;
        const int64_t end = std::min(n, begin + chunk);
        for (int64_t j = begin; j < end; ++j) {
            dequantize_gguf(w.type, w.row(j), wrow, k);
            for (int64_t r = 0; r < rows; ++r) out[r * n + j] = dot_f32(x + r * k, wrow, k);
        }
    });
}

void gguf_embedding(const GgufMatrix& table, const int32_t* ids, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        MOESERVE_CHECK(ids[i] >= 0 && ids[i] < table.rows, "token id {} outside the embedding's {} rows", ids[i],
                       table.rows);
        dequantize_gguf(table.type, table.row(ids[i]), out + i * table.cols, table.cols);
    }
}

void gguf_moe_experts(ThreadPool& pool, const float* x, int64_t num_tokens, const int32_t* topk_ids,
                      const float* topk_weights, int k, const GgufExperts& experts, GgufScratch& scratch, float* out) {
    const int64_t h = experts.hidden;
    const int64_t inter = experts.inter;
    std::fill(out, out + num_tokens * h, 0.0f);
    for (int64_t e = 0; e < experts.num_experts(); ++e) {
        const auto id = static_cast<int32_t>(experts.expert_begin + e);
        // 1. the tokens that chose this expert, with their weights
        scratch.tokens.clear();
        scratch.token_weights.clear();
        for (int64_t t = 0; t < num_tokens; ++t) {
            for (int j = 0; j < k; ++j) {
                if (topk_ids[t * k + j] != id) continue;
                scratch.tokens.push_back(static_cast<int32_t>(t));
                scratch.token_weights.push_back(topk_weights[t * k + j]);
            }
        }
        const auto m = static_cast<int64_t>(scratch.tokens.size());
        if (m == 0) continue;
        scratch.gathered.resize(static_cast<size_t>(m * h));
        for (int64_t i = 0; i < m; ++i) {
            std::copy_n(x + scratch.tokens[static_cast<size_t>(i)] * h, h, scratch.gathered.data() + i * h);
        }
        // 2. gate, up -> silu(gate) * up -> down
        scratch.gate.resize(static_cast<size_t>(m * inter));
        scratch.up.resize(static_cast<size_t>(m * inter));
        scratch.down.resize(static_cast<size_t>(m * h));
        // (gguf_linear touches only scratch.qx and scratch.wrow)
        const float* rows_in = scratch.gathered.data();
        gguf_linear(pool, rows_in, m, experts.gate[static_cast<size_t>(e)], scratch.gate.data(), scratch);
        gguf_linear(pool, rows_in, m, experts.up[static_cast<size_t>(e)], scratch.up.data(), scratch);
        for (int64_t i = 0; i < m * inter; ++i) {
            const float g = scratch.gate[static_cast<size_t>(i)];
            scratch.gate[static_cast<size_t>(i)] = g / (1.0f + std::exp(-g)) * scratch.up[static_cast<size_t>(i)];
        }
        gguf_linear(pool, scratch.gate.data(), m, experts.down[static_cast<size_t>(e)], scratch.down.data(), scratch);
        // 3. out[t] += w * down
        for (int64_t i = 0; i < m; ++i) {
            float* o = out + scratch.tokens[static_cast<size_t>(i)] * h;
            const float wt = scratch.token_weights[static_cast<size_t>(i)];
            const float* d = scratch.down.data() + i * h;
            for (int64_t c = 0; c < h; ++c) o[c] += wt * d[c];
        }
    }
}

}  // namespace moeserve::kernels::cpu
