// DeepSeek-V3/R1 and DeepSeek-V2 (DeepseekV3ForCausalLM / DeepseekV2ForCausalLM): embedding,
// N x [RMSNorm, multi-head latent attention with YaRN RoPE, RMSNorm, dense MLP (the first
// first_k_dense_replace layers) or MoE (grouped top-k routing + shared experts)], final RMSNorm,
// lm_head. The KV cache holds only the compressed latent and the rope key per token.
#pragma once

#include <memory>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/cpu/routing_grouped.h"
#include "moeserve/model/deepseek_v3/config.h"
#include "moeserve/model/layers/attention_mla.h"
#include "moeserve/model/layers/experts.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/layers/parallel_ops.h"
#include "moeserve/model/layers/rotary_embedding.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"

namespace moeserve::model {

class DeepseekV3Model : public Model {
public:
    // Keeps `weights` alive (bf16 tensors are views into its mapping). The pool must outlive the model.
    DeepseekV3Model(const DeepseekV3Config& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                    const LoadOptions& options);

    const ModelInfo& info() const override { return info_; }
    std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const ForwardBatch& batch, KvCache& kv) override;

    // Forces the absorbed or the expanded attention for every sequence (tests compare them);
    // kAuto (the default) absorbs for decode and expands for prefill chunks.
    void set_attention_path(MlaPath path) { path_ = path; }
    // KV bytes one token would take with full per-head keys and values (no latent compression).
    int64_t full_kv_bytes_per_token() const;

private:
    struct Layer {
        Tensor input_layernorm;           // f32 [hidden]
        Tensor post_attention_layernorm;  // f32 [hidden]
        MlaAttention attention;
        bool is_moe = false;
        Linear gate;                                                 // [n_routed_experts, hidden]
        Tensor score_bias;                                           // f32 [n_routed_experts] (noaux_tc), or empty
        Experts experts;                                             // routed experts, or the dense MLP as one expert
        Experts shared;                                              // shared experts as one expert, or empty
        Tensor input_layernorm_bias, post_attention_layernorm_bias;  // f32 [hidden] or empty (ModelSlim)
    };
    void mlp_forward(const Layer& layer, const float* h, int64_t num_tokens, parallel::MoeExchangeKind exchange,
                     float* out);

    const DeepseekV3Config config_;
    const ParallelConfig par_;  // this rank's TP/EP shard
    const DType kv_dtype_;      // latent cache element type (LoadOptions::kv_dtype)
    ShardRange vocab_shard_;    // embedding / lm_head rows held here
    ShardRange expert_shard_;   // routed experts held here
    std::shared_ptr<const io::WeightSource> weights_;
    ThreadPool& pool_;
    ModelInfo info_;
    kernels::cpu::GroupedTopkArgs routing_{};
    MlaPath path_ = MlaPath::kAuto;
    TensorView embed_tokens_;  // bf16 | f32 (--dtype float32) [vocab, hidden]
    Tensor embed_owned_;       // the f32 widening behind embed_tokens_, when there is one
    std::vector<Layer> layers_;
    Tensor norm_;     // f32 [hidden]
    Linear lm_head_;  // [vocab, hidden]
    std::unique_ptr<RotaryEmbedding> rope_;

    // Scratch, reused across steps.
    std::vector<float> x_, h_, tmp_, shared_out_, router_logits_, topk_weights_;
    std::vector<int32_t> topk_ids_;
    std::vector<float> dense_weights_;
    std::vector<int32_t> dense_ids_;
    MlaScratch attn_scratch_;
    kernels::cpu::MoeScratch moe_scratch_;
    ParallelMoe parallel_moe_;
    LogitsScratch logits_scratch_;
};

}  // namespace moeserve::model
