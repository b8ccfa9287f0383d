#include "moeserve/model/qwen2_moe/model.h"

#include "moeserve/model/layers/routing.h"

namespace moeserve::model {

DecoderSpec Qwen2MoeModel::decoder_spec(const Qwen2MoeConfig& c) {
    DecoderSpec s{.config = DecoderConfig::of(c),
                  .moe = {c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size,
                          c.shared_expert_intermediate_size, c.intermediate_size},
                  .names = {.shared_experts = "mlp.shared_expert.", .shared_expert_gate = "mlp.shared_expert_gate"},
                  .is_moe_layer = [c](int64_t i) { return c.is_moe_layer(i); },
                  .route = {}};
    // softmax over all experts, top-k, renormalized when norm_topk_prob (HF Qwen2MoeSparseMoeBlock)
    s.route = softmax_topk_rule(c.num_experts, static_cast<int>(c.num_experts_per_tok), c.norm_topk_prob);
    return s;
}

GqaModelSpec Qwen2MoeModel::model_spec(const Qwen2MoeConfig& c) {
    return {.model_type = "qwen2_moe",
            .decoder = decoder_spec(c),
            .attention = {c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim(), /*qk_norm=*/false,
                          /*bias=*/true, c.rms_norm_eps},
            .rope = c.rope,
            .rotary_dim = c.head_dim(),
            .max_position_embeddings = c.max_position_embeddings};
}

Qwen2MoeModel::Qwen2MoeModel(const Qwen2MoeConfig& config, std::shared_ptr<const io::WeightSource> weights,
                             ThreadPool& pool, const LoadOptions& options)
    : GqaMoeModel(model_spec(config), std::move(weights), pool, options) {}

std::unique_ptr<Model> Qwen2MoeModel::load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                           ThreadPool& pool, const LoadOptions& options) {
    const Qwen2MoeConfig c = Qwen2MoeConfig::from_json(config);
    return std::make_unique<Qwen2MoeModel>(c, open_hf_checkpoint(model_dir, options, "qwen2_moe"), pool, options);
}

std::unique_ptr<Model> Qwen2MoeModel::load_weights(const io::HfConfig& config,
                                                   std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                                   const LoadOptions& options) {
    return std::make_unique<Qwen2MoeModel>(Qwen2MoeConfig::from_json(config), std::move(weights), pool, options);
}

}  // namespace moeserve::model
