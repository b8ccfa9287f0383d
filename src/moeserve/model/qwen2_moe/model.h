// Qwen2-MoE (Qwen2MoeForCausalLM, also Qwen1.5-MoE): embedding, N x [RMSNorm, GQA attention with
// q/k/v biases and RoPE (no q/k norm), RMSNorm, sparse MoE (softmax top-k, renormalized when
// norm_topk_prob) plus a shared expert scaled by sigmoid(shared_expert_gate . x), or a dense
// MLP], final RMSNorm, lm_head. The decoder skeleton is model/moe_decoder.h.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/layers/attention_gqa.h"
#include "moeserve/model/layers/rotary_embedding.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"
#include "moeserve/model/moe_decoder.h"
#include "moeserve/model/qwen2_moe/config.h"

namespace moeserve::model {

class Qwen2MoeModel : public Model {
public:
    Qwen2MoeModel(const Qwen2MoeConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                  const LoadOptions& options);
    // The architecture table's loader: config.json and the checkpoint of model_dir.
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);

    static DecoderSpec decoder_spec(const Qwen2MoeConfig& config);

    const ModelInfo& info() const override { return decoder_.info(); }
    std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const ForwardBatch& batch, KvCache& kv) override;

private:
    const Qwen2MoeConfig config_;
    int64_t local_kv_heads_ = 0;
    std::vector<GqaAttention> attention_;  // per layer; filled while decoder_ loads
    MoeDecoder decoder_;
    std::unique_ptr<RotaryEmbedding> rope_;
    GqaScratch attn_scratch_;
};

}  // namespace moeserve::model
