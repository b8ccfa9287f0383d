// GLM-4.5 / 4.6 / 4.5-Air (Glm4MoeForCausalLM): embedding, N x [RMSNorm, GQA attention (q/k/v
// biases and q/k norms where configured, RoPE on the first partial_rotary_factor of each head,
// rotate-half), RMSNorm, MoE (DeepSeek-V3's router: sigmoid scores plus the correction bias,
// grouped top-k, renormalized, scaled) with shared experts, or a dense MLP on the first layers],
// final RMSNorm, lm_head. The decoder skeleton is model/moe_decoder.h.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/glm4_moe/config.h"
#include "moeserve/model/layers/attention_gqa.h"
#include "moeserve/model/layers/rotary_embedding.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"
#include "moeserve/model/moe_decoder.h"

namespace moeserve::model {

class Glm4MoeModel : public Model {
public:
    Glm4MoeModel(const Glm4MoeConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                 const LoadOptions& options);
    // The architecture table's loader: config.json and the checkpoint of model_dir.
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);

    static DecoderSpec decoder_spec(const Glm4MoeConfig& config);

    const ModelInfo& info() const override { return decoder_.info(); }
    std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const ForwardBatch& batch, KvCache& kv) override;

private:
    const Glm4MoeConfig config_;
    int64_t local_kv_heads_ = 0;
    std::vector<GqaAttention> attention_;  // per layer; filled while decoder_ loads
    MoeDecoder decoder_;
    std::unique_ptr<RotaryEmbedding> rope_;
    GqaScratch attn_scratch_;
};

}  // namespace moeserve::model
