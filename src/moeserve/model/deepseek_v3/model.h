// DeepSeek-V3/R1 and DeepSeek-V2 (DeepseekV3ForCausalLM / DeepseekV2ForCausalLM): embedding,
// N x [RMSNorm, multi-head latent attention with YaRN RoPE, RMSNorm, dense MLP (the first
// first_k_dense_replace layers) or MoE (grouped top-k routing + shared experts)], final RMSNorm,
// lm_head. The KV cache holds only the compressed latent and the rope key per token. The decoder
// skeleton is model/moe_decoder.h; this file holds the MLA attention and the routing rule.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/deepseek_v3/config.h"
#include "moeserve/model/layers/attention_mla.h"
#include "moeserve/model/layers/rotary_embedding.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"
#include "moeserve/model/moe_decoder.h"

namespace moeserve::model {

class DeepseekV3Model : public Model {
public:
    // The architecture table's loader (architecture.h) for deepseek_v3 and deepseek_v2: HF names,
    // or a golden-stick A8W8 checkpoint in MindFormers names (read through
    // mindformers_checkpoint.h); kInvalidModel when the names and quant_method disagree.
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);
    // The same from an opened source (a GGUF file: formats/gguf.h).
    static std::unique_ptr<Model> load_weights(const io::HfConfig& config,
                                               std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                               const LoadOptions& options);
    // Keeps `weights` alive (bf16 tensors are views into its mapping). The pool must outlive the model.
    DeepseekV3Model(const DeepseekV3Config& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                    const LoadOptions& options);

    // Forces the absorbed or the expanded attention for every sequence (tests compare them);
    // kAuto (the default) absorbs for decode and expands for prefill chunks.
    void set_attention_path(MlaPath path) { path_ = path; }
    // KV bytes one token would take with full per-head keys and values (no latent compression).
    int64_t full_kv_bytes_per_token() const;

    // The decoder's part of this architecture: sizes, tensor names, routing rule (also what
    // weight_specs.cpp lists the tensors from).
    static DecoderSpec decoder_spec(const DeepseekV3Config& config);

    const ModelInfo& info() const override { return decoder_.info(); }
    std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const ForwardBatch& batch, KvCache& kv) override;
    bool has_draft_head() const override { return decoder_.has_draft_head(); }
    TensorView forward_draft(const ForwardBatch& batch, KvCache& kv) override;
    const ExpertLoadStats* expert_load() const override { return decoder_.expert_load(); }
    int64_t routed_expert_bytes() const override { return decoder_.routed_expert_bytes(); }
    void group_reformed() override { decoder_.group_reformed(); }

private:
    const DeepseekV3Config config_;
    MlaPath path_ = MlaPath::kAuto;
    std::vector<MlaAttention> attention_;  // per layer; filled while decoder_ loads
    MoeDecoder decoder_;
    std::unique_ptr<RotaryEmbedding> rope_;
    MlaScratch attn_scratch_;

    // Runs layer i's MLA attention of `batch` on the cache's layer i (forward and forward_draft).
    MoeDecoder::AttentionStep attention_step(const ForwardBatch& batch, KvCache& kv);
    // Layers of the KV cache: the decoder's, and the draft head's when it is loaded.
    int64_t kv_layers() const { return config_.num_hidden_layers + (decoder_.has_draft_head() ? 1 : 0); }
};

}  // namespace moeserve::model
