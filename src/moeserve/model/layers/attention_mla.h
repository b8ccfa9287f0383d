// Multi-head latent attention (DeepSeek-V2/V3) over a paged cache of compressed latents.
// q: q_proj, or q_a_proj -> q_a_layernorm -> q_b_proj; per head [q_nope, q_pe].
// kv_a_proj_with_mqa -> [latent, k_pe]; latent -> kv_a_layernorm; k_pe -> RoPE (one key for
// all heads). The cache keeps [latent, k_pe] per token. Two equal ways to attend:
//   expanded: kv_b_proj turns every cached latent into per-head [k_nope, v]; standard attention
//   absorbed: q_nope is folded through W_UK into the latent space, scores are
//             q_abs . latent + q_pe . k_pe, the output latent goes through W_UV afterwards.
//   split:    a prefill chunk over a cached prefix: the prefix absorbed (no kv_b_proj over the
//             cached context), the chunk's own tokens expanded, the two softmaxes merged by their
//             log-sum-exp. Exact as well; cheaper than re-expanding the prefix for short chunks.
#pragma once

#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/attention_types.h"
#include "moeserve/kernels/buffer.h"
#include "moeserve/model/forward_batch.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/layers/rotary_embedding.h"

namespace moeserve::model {

struct MlaShape {
    int64_t hidden_size, num_heads;
    int64_t q_lora_rank;  // 0: q_proj (no q compression)
    int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    double softmax_scale;
    double lora_norm_eps;  // q_a_layernorm / kv_a_layernorm (1e-6 in HF and DeepSeek code)
    bool bias;             // attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj have biases
};

// Which form each sequence of a batch attends with.
enum class MlaPath {
    kAuto,      // per sequence, the form mla_auto_path() says does the least work: absorbed for
                // decode and verify steps (a few new tokens), split or expanded for prefill chunks
    kAbsorbed,  // absorbed for every sequence
    kExpanded,  // expanded for every sequence (the whole cached context re-expanded per chunk)
    kSplit,     // split for every chunk with a cached prefix, expanded for the rest
};

// Multiply-adds per head of one chunk of q_len tokens after `prefix` cached ones: re-expanding
// all prefix + q_len latents (kv_b_proj) and attending over them, against the split form.
bool mla_split_is_cheaper(const MlaShape& c, int64_t q_len, int64_t prefix);
// kAuto's choice for such a chunk: absorbed for one token (decode), else the form with the fewest
// multiply-adds (absorbed attends every cached row in the latent space, so it wins for a few
// tokens: a speculative verify step computes its rows as decode steps would).
MlaPath mla_auto_path(const MlaShape& c, int64_t q_len, int64_t prefix);

// Per-forward buffers, grown on demand and reused across layers and steps.
struct MlaScratch {
    kernels::Buffer q_a, q, kv_a, latent, attn;
    kernels::Buffer q_abs, lat_out, v_out;         // absorbed path
    kernels::Buffer kv, k, v, q_pad, o_pad, rows;  // expanded path (rows: cached [latent, k_pe] f32)
    kernels::Buffer lse_prefix, lse_chunk;         // split path: [q_len, H] each
    std::vector<int32_t> abs_rows, abs_start, abs_lens, abs_tables;
};

class MlaAttention {
public:
    // prefix: "model.layers.N.self_attn.". Tensor parallelism (tp_size > 1): this rank keeps heads
    // [tp_rank * H/tp, +H/tp) of q_b/q_proj and kv_b (column-parallel) and of o_proj (row-parallel:
    // forward() returns a partial sum the caller all-reduces over TP); the latent path (q_a, kv_a)
    // and the latent cache are replicated. H not divisible by tp is Error kInvalidArgument.
    // quant: which projections run W8A8 int8 (kv_b_proj never: it is absorbed, kept dequantized).
    static MlaAttention load(const io::WeightSource& weights, const std::string& prefix, const MlaShape& shape,
                             int tp_rank = 0, int tp_size = 1, const Quantization& quant = {});

    // h f32 [T, hidden] -> out f32 [T, hidden]; writes this layer's latents of the batch into kv.
    void forward(ThreadPool& pool, const float* h, const ForwardBatch& batch, const kernels::PagedLatentLayer& kv,
                 const RotaryEmbedding& rope, MlaPath path, MlaScratch& scratch, float* out) const;

    size_t weight_bytes() const;

private:
    void attend_absorbed(ThreadPool& pool, const ForwardBatch& batch, const std::vector<int64_t>& seqs,
                         const kernels::PagedLatentLayer& kv, MlaScratch& s) const;
    void attend_expanded(ThreadPool& pool, const ForwardBatch& batch, int64_t seq, const kernels::PagedLatentLayer& kv,
                         MlaScratch& s) const;
    void attend_split(ThreadPool& pool, const ForwardBatch& batch, int64_t seq, const kernels::PagedLatentLayer& kv,
                      MlaScratch& s) const;
    // Causal expanded attention of seq's queries over its cached positions [begin, len) only:
    // out [q_len, H, dp] (dp = max(qk, v), the first v values are the output), lse [q_len, H].
    void attend_expanded_range(ThreadPool& pool, const ForwardBatch& batch, int64_t seq, int64_t begin,
                               const kernels::PagedLatentLayer& kv, MlaScratch& s, float* lse) const;
    kernels::MlaKvB kv_b() const;

    MlaShape shape_{};
    Linear q_proj_, q_a_proj_, q_b_proj_, kv_a_proj_, kv_b_proj_, o_proj_;
    Tensor q_a_norm_, kv_a_norm_;            // f32 [q_lora_rank], [kv_lora_rank]
    Tensor q_a_norm_bias_, kv_a_norm_bias_;  // the same shapes, or empty (ModelSlim anti-outlier)
    TensorView kv_b_w_;                      // bf16 | f32 [num_heads * (nope + v), kv_lora_rank]
    Tensor kv_b_owned_;                      // f32 copy when the checkpoint's kv_b_proj is neither (or --dtype float32)
};

}  // namespace moeserve::model
