// The model of a MoE architecture with GQA attention (Qwen3-MoE, Qwen2-MoE, Mixtral, GLM-4.5):
// the shared decoder (moe_decoder.h), one GqaAttention per layer and one RoPE table. An
// architecture's folder supplies only what is its own: the DecoderSpec (sizes, names, routing),
// the attention shape and the rotary settings (GqaModelSpec), and its loader's refusals.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/layers/attention_gqa.h"
#include "moeserve/model/layers/rope_scaling.h"
#include "moeserve/model/layers/rotary_embedding.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"
#include "moeserve/model/moe_decoder.h"

namespace moeserve::model {

struct GqaModelSpec {
    std::string model_type;  // ModelInfo::model_type
    DecoderSpec decoder;
    GqaShape attention;
    RopeScaling rope;
    int64_t rotary_dim = 0;  // dims rotated per head: head_dim, or fewer (partial RoPE)
    int64_t max_position_embeddings = 0;
    // Per layer: the sliding window (0: full attention); empty: every layer full (gpt-oss
    // alternates, Mistral-style configs slide on all).
    std::vector<int64_t> layer_windows{};
    // rotate-half pairs (HF), or adjacent pairs: llama.cpp's llama GGUFs store q/k rows permuted
    // to that order, and adjacent-pair RoPE on them gives the same scores (formats/gguf_llama.cpp)
    kernels::RopeStyle rope_style = kernels::RopeStyle::kNeox;
};

class GqaMoeModel : public Model {
public:
    // Keeps `weights` alive (bf16 tensors are views into its mapping). The pool must outlive the model.
    GqaMoeModel(GqaModelSpec spec, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                const LoadOptions& options);

    const ModelInfo& info() const override { return decoder_.info(); }
    std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const override;
    TensorView forward(const ForwardBatch& batch, KvCache& kv) override;
    const ExpertLoadStats* expert_load() const override { return decoder_.expert_load(); }
    int64_t routed_expert_bytes() const override { return decoder_.routed_expert_bytes(); }
    void group_reformed() override { decoder_.group_reformed(); }

private:
    const GqaModelSpec spec_;
    KvSlice kv_heads_;                     // of this TP rank
    std::vector<GqaAttention> attention_;  // per layer; filled while decoder_ loads
    MoeDecoder decoder_;
    std::unique_ptr<RotaryEmbedding> rope_;
    GqaScratch attn_scratch_;
};

// The checkpoint of model_dir, refusing a MindSpore golden-stick / MindFormers one (moeserve knows
// MindFormers names for DeepSeek only): Error kUnsupported naming the directory and model_type.
std::unique_ptr<io::WeightSource> open_hf_checkpoint(const std::filesystem::path& model_dir, const LoadOptions& options,
                                                     const std::string& model_type);

}  // namespace moeserve::model
