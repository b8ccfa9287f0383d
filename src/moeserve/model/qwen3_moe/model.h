// Qwen3-MoE (Qwen3MoeForCausalLM): embedding, N x [RMSNorm, GQA attention with q/k norm and
// RoPE, RMSNorm, sparse MoE (softmax top-k) or dense MLP], final RMSNorm, lm_head.
#pragma once

#include <memory>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/layers/attention_gqa.h"
#include "moeserve/model/layers/experts.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/layers/parallel_ops.h"
#include "moeserve/model/layers/rotary_embedding.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"
#include "moeserve/model/qwen3_moe/config.h"

namespace moeserve::model {

class Qwen3MoeModel : public Model {
public:
    // Keeps `weights` alive (bf16 tensors are views into its mapping). The pool must outlive the model.
    Qwen3MoeModel(const Qwen3MoeConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                  const LoadOptions& options);

    const ModelInfo& info() const override { return info_; }
    std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const ForwardBatch& batch, KvCache& kv) override;

private:
    struct Layer {
        Tensor input_layernorm;           // f32 [hidden]
        Tensor post_attention_layernorm;  // f32 [hidden]
        GqaAttention attention;
        bool is_moe = false;
        Linear router;                                               // bf16 [num_experts, hidden]
        Experts experts;                                             // routed experts, or the dense MLP as one expert
        Tensor input_layernorm_bias, post_attention_layernorm_bias;  // f32 [hidden] or empty (ModelSlim)
    };
    void moe_forward(const Layer& layer, const float* h, int64_t num_tokens, parallel::MoeExchangeKind exchange,
                     float* out);

    const Qwen3MoeConfig config_;
    const ParallelConfig par_;  // this rank's TP/EP shard
    const DType kv_dtype_;      // KV cache element type (LoadOptions::kv_dtype)
    ShardRange vocab_shard_;    // embedding / lm_head rows held here
    ShardRange expert_shard_;   // routed experts held here
    int64_t local_kv_heads_ = 0;
    std::shared_ptr<const io::WeightSource> weights_;
    ThreadPool& pool_;
    ModelInfo info_;
    TensorView embed_tokens_;  // bf16 | f32 (--dtype float32) [vocab_shard.count, hidden]
    Tensor embed_owned_;       // the f32 widening behind embed_tokens_, when there is one
    std::vector<Layer> layers_;
    Tensor norm_;     // f32 [hidden]
    Linear lm_head_;  // [vocab_shard.count, hidden] (embed_tokens when tied)
    std::unique_ptr<RotaryEmbedding> rope_;

    // Scratch, reused across steps.
    std::vector<float> x_, h_, tmp_, router_logits_, topk_weights_;
    std::vector<int32_t> topk_ids_;
    std::vector<float> dense_weights_;
    std::vector<int32_t> dense_ids_;
    GqaScratch attn_scratch_;
    kernels::cpu::MoeScratch moe_scratch_;
    ParallelMoe parallel_moe_;
    LogitsScratch logits_scratch_;
};

}  // namespace moeserve::model
