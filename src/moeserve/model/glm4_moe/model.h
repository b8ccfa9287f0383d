// GLM-4.5 / 4.6 / 4.5-Air (Glm4MoeForCausalLM): embedding, N x [RMSNorm, GQA attention (q/k/v
// biases and q/k norms where configured, RoPE on the first partial_rotary_factor of each head,
// rotate-half), RMSNorm, MoE (DeepSeek-V3's router: sigmoid scores plus the correction bias,
// grouped top-k, renormalized, scaled) with shared experts, or a dense MLP on the first layers],
// final RMSNorm, lm_head. The decoder skeleton is model/moe_decoder.h.
#pragma once

#include <filesystem>
#include <memory>

#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/gqa_moe_model.h"
#include "moeserve/model/glm4_moe/config.h"

namespace moeserve::model {

class Glm4MoeModel : public GqaMoeModel {
public:
    Glm4MoeModel(const Glm4MoeConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                 const LoadOptions& options);
    // The architecture table's loader (architecture.h): config.json and the checkpoint of
    // model_dir, `options` resolved.
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);
    // The same from an opened source (a GGUF file's: formats/gguf_glm4moe.cpp).
    static std::unique_ptr<Model> load_weights(const io::HfConfig& config,
                                               std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                               const LoadOptions& options);

    // The decoder's part of this architecture: sizes, tensor names, routing rule (also what
    // weight_specs.cpp lists the tensors from).
    static DecoderSpec decoder_spec(const Glm4MoeConfig& config);
    // Everything GqaMoeModel needs: the decoder spec, attention shape and rotary settings.
    static GqaModelSpec model_spec(const Glm4MoeConfig& config);
};

}  // namespace moeserve::model
