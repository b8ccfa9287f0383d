// Qwen2-MoE (Qwen2MoeForCausalLM, also Qwen1.5-MoE): embedding, N x [RMSNorm, GQA attention with
// q/k/v biases and RoPE (no q/k norm), RMSNorm, sparse MoE (softmax top-k, renormalized when
// norm_topk_prob) plus a shared expert scaled by sigmoid(shared_expert_gate . x), or a dense
// MLP], final RMSNorm, lm_head. The decoder skeleton is model/moe_decoder.h.
#pragma once

#include <filesystem>
#include <memory>

#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/gqa_moe_model.h"
#include "moeserve/model/qwen2_moe/config.h"

namespace moeserve::model {

class Qwen2MoeModel : public GqaMoeModel {
public:
    Qwen2MoeModel(const Qwen2MoeConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                  const LoadOptions& options);
    // The architecture table's loader (architecture.h): config.json and the checkpoint of
    // model_dir, `options` resolved.
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);
    // The same from an opened source (a GGUF file's: formats/gguf_qwen2moe.cpp).
    static std::unique_ptr<Model> load_weights(const io::HfConfig& config,
                                               std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                               const LoadOptions& options);

    // The decoder's part of this architecture: sizes, tensor names, routing rule (also what
    // weight_specs.cpp lists the tensors from).
    static DecoderSpec decoder_spec(const Qwen2MoeConfig& config);
    // Everything GqaMoeModel needs: the decoder spec, attention shape and rotary settings.
    static GqaModelSpec model_spec(const Qwen2MoeConfig& config);
};

}  // namespace moeserve::model
