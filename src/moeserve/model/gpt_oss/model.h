// gpt-oss (GptOssForCausalLM): embedding, N x [RMSNorm, GQA attention with biases, per-head sinks,
// YaRN RoPE and a sliding window on alternate layers, RMSNorm, sparse MoE: a biased router whose
// top-k logits are softmaxed, experts with biases and a clamped SwiGLU], final RMSNorm, lm_head.
// The decoder skeleton is model/moe_decoder.h; the stacked experts load through experts.h.
#pragma once

#include <filesystem>
#include <memory>

#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/gpt_oss/config.h"
#include "moeserve/model/gqa_moe_model.h"

namespace moeserve::model {

class GptOssModel : public GqaMoeModel {
public:
    GptOssModel(const GptOssConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                const LoadOptions& options);
    // The architecture table's loader (architecture.h).
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);
    // The same from an opened source (a GGUF file's: formats/gguf_gpt_oss.cpp).
    static std::unique_ptr<Model> load_weights(const io::HfConfig& config,
                                               std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                               const LoadOptions& options);

    static DecoderSpec decoder_spec(const GptOssConfig& config);
    static GqaModelSpec model_spec(const GptOssConfig& config);
};

}  // namespace moeserve::model
