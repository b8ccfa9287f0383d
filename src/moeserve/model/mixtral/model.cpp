#include "moeserve/model/mixtral/model.h"

#include "moeserve/model/layers/routing.h"
#include "moeserve/model/mixtral/names.h"

namespace moeserve::model {

DecoderSpec MixtralModel::decoder_spec(const MixtralConfig& c) {
    DecoderSpec s{
        .config = DecoderConfig::of(c),
        .moe = {c.hidden_size, c.num_local_experts, c.num_experts_per_tok, c.intermediate_size, 0, c.intermediate_size},
        .names = {.router = mixtral::kRouter, .experts = mixtral::kExperts, .projections = mixtral::kProjections},
        .is_moe_layer = [](int64_t) { return true; },
        .route = {}};
    // HF's MixtralSparseMoeBlock: softmax over all experts, top-k, renormalized
    s.route = softmax_topk_rule(c.num_local_experts, static_cast<int>(c.num_experts_per_tok), /*renormalize=*/true);
    return s;
}

GqaModelSpec MixtralModel::model_spec(const MixtralConfig& c) {
    return {.model_type = "mixtral",
            .decoder = decoder_spec(c),
            .attention = {c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, /*qk_norm=*/false,
                          /*bias=*/false, c.rms_norm_eps},
            .rope = c.rope,
            .rotary_dim = c.head_dim,
            .max_position_embeddings = c.max_position_embeddings,
            .layer_windows = std::vector<int64_t>(static_cast<size_t>(c.num_hidden_layers), c.sliding_window),
            .rope_style = c.rope_interleave ? kernels::RopeStyle::kInterleaved : kernels::RopeStyle::kNeox};
}

MixtralModel::MixtralModel(const MixtralConfig& config, std::shared_ptr<const io::WeightSource> weights,
                           ThreadPool& pool, const LoadOptions& options)
    : GqaMoeModel(model_spec(config), std::move(weights), pool, options) {}

std::unique_ptr<Model> MixtralModel::load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                          ThreadPool& pool, const LoadOptions& options) {
    const MixtralConfig c = MixtralConfig::from_json(config);
    return std::make_unique<MixtralModel>(c, open_hf_checkpoint(model_dir, options, "mixtral"), pool, options);
}

std::unique_ptr<Model> MixtralModel::load_weights(const io::HfConfig& config,
                                                  std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                                  const LoadOptions& options) {
    return std::make_unique<MixtralModel>(MixtralConfig::from_json(config), std::move(weights), pool, options);
}

}  // namespace moeserve::model
