// Mixtral (MixtralForCausalLM): embedding, N x [RMSNorm, GQA attention with RoPE (no q/k norm,
// no bias), RMSNorm, sparse MoE: softmax over the experts, top-k, renormalized], final RMSNorm,
// lm_head. The decoder skeleton is model/moe_decoder.h; Mixtral's names map onto the MoE block's
// (names.h).
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
#include "moeserve/model/mixtral/config.h"
#include "moeserve/model/model.h"
#include "moeserve/model/moe_decoder.h"

namespace moeserve::model {

class MixtralModel : public Model {
public:
    // `weights` under the MoE block's names (load() renames a checkpoint's). Keeps it alive; the
    // pool must outlive the model.
    MixtralModel(const MixtralConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                 const LoadOptions& options);
    // The architecture table's loader: config.json and the checkpoint of model_dir.
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);

    static DecoderSpec decoder_spec(const MixtralConfig& config);

    const ModelInfo& info() const override { return decoder_.info(); }
    std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const ForwardBatch& batch, KvCache& kv) override;

private:
    const MixtralConfig config_;
    int64_t local_kv_heads_ = 0;
    std::vector<GqaAttention> attention_;  // per layer; filled while decoder_ loads
    MoeDecoder decoder_;
    std::unique_ptr<RotaryEmbedding> rope_;
    GqaScratch attn_scratch_;
};

}  // namespace moeserve::model
