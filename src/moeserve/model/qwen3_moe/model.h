// Qwen3-MoE (Qwen3MoeForCausalLM): embedding, N x [RMSNorm, GQA attention with q/k norm and
// RoPE, RMSNorm, sparse MoE (softmax top-k) or dense MLP], final RMSNorm, lm_head. The decoder
// skeleton is model/moe_decoder.h; this file holds the GQA attention and the routing rule.
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
#include "moeserve/model/qwen3_moe/config.h"

namespace moeserve::model {

class Qwen3MoeModel : public Model {
public:
    // Keeps `weights` alive (bf16 tensors are views into its mapping). The pool must outlive the model.
    Qwen3MoeModel(const Qwen3MoeConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                  const LoadOptions& options);
    // The architecture table's loader (architecture.h): config.json and the checkpoint of
    // model_dir, `options` resolved. Refuses golden-stick / MindFormers checkpoints (kUnsupported).
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);
    // The same from an opened source (a GGUF file: formats/gguf.h).
    static std::unique_ptr<Model> load_weights(const io::HfConfig& config,
                                               std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                               const LoadOptions& options);

    // The decoder's part of this architecture: sizes, tensor names, routing rule (also what
    // weight_specs.cpp lists the tensors from).
    static DecoderSpec decoder_spec(const Qwen3MoeConfig& config);

    const ModelInfo& info() const override { return decoder_.info(); }
    std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const ForwardBatch& batch, KvCache& kv) override;

private:
    const Qwen3MoeConfig config_;
    int64_t local_kv_heads_ = 0;
    std::vector<GqaAttention> attention_;  // per layer; filled while decoder_ loads
    MoeDecoder decoder_;
    std::unique_ptr<RotaryEmbedding> rope_;
    GqaScratch attn_scratch_;
};

}  // namespace moeserve::model
