#include "moeserve/model/glm4_moe/model.h"

#include "moeserve/model/layers/routing.h"

namespace moeserve::model {

DecoderSpec Glm4MoeModel::decoder_spec(const Glm4MoeConfig& c) {
    DecoderSpec s{.config = DecoderConfig::of(c),
                  .moe = {c.hidden_size, c.n_routed_experts, c.num_experts_per_tok, c.moe_intermediate_size,
                          c.n_shared_experts * c.moe_intermediate_size, c.intermediate_size},
                  .names = {.router_bias = "mlp.gate.e_score_correction_bias", .shared_experts = "mlp.shared_experts."},
                  .is_moe_layer = [c](int64_t i) { return c.is_moe_layer(i); },
                  .route = {}};
    // HF Glm4MoeTopkRouter is DeepSeek-V3's: sigmoid, bias for the choice, top-2-sum groups,
    // renormalized when norm_topk_prob, then scaled
    s.route = grouped_topk_rule({.num_experts = c.n_routed_experts,
                                 .k = static_cast<int>(c.num_experts_per_tok),
                                 .scoring_func = "sigmoid",
                                 .topk_method = "noaux_tc",
                                 .n_group = c.n_group,
                                 .topk_group = c.topk_group,
                                 .norm_topk_prob = c.norm_topk_prob,
                                 .routed_scaling_factor = c.routed_scaling_factor});
    return s;
}

GqaModelSpec Glm4MoeModel::model_spec(const Glm4MoeConfig& c) {
    return {.model_type = "glm4_moe",
            .decoder = decoder_spec(c),
            .attention = {c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.use_qk_norm,
                          c.attention_bias, c.rms_norm_eps},
            .rope = c.rope,
            .rotary_dim = c.rotary_dim(),
            .max_position_embeddings = c.max_position_embeddings};
}

Glm4MoeModel::Glm4MoeModel(const Glm4MoeConfig& config, std::shared_ptr<const io::WeightSource> weights,
                           ThreadPool& pool, const LoadOptions& options)
    : GqaMoeModel(model_spec(config), std::move(weights), pool, options) {}

std::unique_ptr<Model> Glm4MoeModel::load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                          ThreadPool& pool, const LoadOptions& options) {
    const Glm4MoeConfig c = Glm4MoeConfig::from_json(config);
    return std::make_unique<Glm4MoeModel>(c, open_hf_checkpoint(model_dir, options, "glm4_moe"), pool, options);
}

std::unique_ptr<Model> Glm4MoeModel::load_weights(const io::HfConfig& config,
                                                  std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                                  const LoadOptions& options) {
    return std::make_unique<Glm4MoeModel>(Glm4MoeConfig::from_json(config), std::move(weights), pool, options);
}

}  // namespace moeserve::model
