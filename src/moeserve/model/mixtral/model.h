// Mixtral (MixtralForCausalLM): embedding, N x [RMSNorm, GQA attention with RoPE (no q/k norm,
// no bias; a sliding window where configured), RMSNorm, sparse MoE: softmax over the experts, top-k, renormalized],
// final RMSNorm, lm_head. The decoder skeleton is model/moe_decoder.h; Mixtral's names map onto the MoE block's
// (names.h).
#pragma once

#include <filesystem>
#include <memory>

#include "moeserve/io/hf_config.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/gqa_moe_model.h"
#include "moeserve/model/mixtral/config.h"

namespace moeserve::model {

class MixtralModel : public GqaMoeModel {
public:
    // `weights` under the MoE block's names (load() reads a checkpoint's so).
    MixtralModel(const MixtralConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                 const LoadOptions& options);
    // The architecture table's loader (architecture.h): config.json and the checkpoint of
    // model_dir, `options` resolved.
    static std::unique_ptr<Model> load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                       ThreadPool& pool, const LoadOptions& options);
    // The same from an opened source (a llama GGUF with experts: formats/gguf_llama.cpp).
    static std::unique_ptr<Model> load_weights(const io::HfConfig& config,
                                               std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                               const LoadOptions& options);

    // The decoder's part of this architecture: sizes, tensor names, routing rule (also what
    // weight_specs.cpp lists the tensors from).
    static DecoderSpec decoder_spec(const MixtralConfig& config);
    // Everything GqaMoeModel needs: the decoder spec, attention shape and rotary settings.
    static GqaModelSpec model_spec(const MixtralConfig& config);
};

}  // namespace moeserve::model
