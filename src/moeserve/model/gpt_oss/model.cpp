#include "moeserve/model/gpt_oss/model.h"

#include "moeserve/model/gpt_oss/experts.h"
#include "moeserve/model/layers/routing.h"

namespace moeserve::model {

namespace {

// HF's GptOssTopKRouter: logits = x W^T + b, the top-k logits softmaxed among themselves, which
// is the softmax over all experts renormalized over the top k.
RoutingRule biased_topk_softmax_rule(int64_t num_experts, int k) {
    const RoutingRule softmax_topk = softmax_topk_rule(num_experts, k, /*renormalize=*/true);
    return [num_experts, softmax_topk](float* logits, int64_t num_tokens, const float* bias, int32_t* ids,
                                       float* weights) {
        for (int64_t t = 0; bias != nullptr && t < num_tokens; ++t) {
            for (int64_t e = 0; e < num_experts; ++e) logits[t * num_experts + e] += bias[e];
        }
        softmax_topk(logits, num_tokens, nullptr, ids, weights);
    };
}

}  // namespace

DecoderSpec GptOssModel::decoder_spec(const GptOssConfig& c) {
    const gpt_oss::ExpertsShape experts{c.num_local_experts, c.hidden_size, c.intermediate_size,
                                        static_cast<float>(c.swiglu_limit), GptOssConfig::kGluAlpha};
    return {.config = DecoderConfig::of(c),
            .moe = {c.hidden_size, c.num_local_experts, c.num_experts_per_tok, c.intermediate_size, 0, 0},
            .names = {.router = gpt_oss::kRouter,
                      .router_bias = std::string(gpt_oss::kRouter) + ".bias",
                      .experts = gpt_oss::kExperts,
                      .load_routed_experts = gpt_oss::routed_experts_loader(experts)},
            .is_moe_layer = [](int64_t) { return true; },
            .route = biased_topk_softmax_rule(c.num_local_experts, static_cast<int>(c.num_experts_per_tok))};
}

GqaModelSpec GptOssModel::model_spec(const GptOssConfig& c) {
    return {.model_type = "gpt_oss",
            .decoder = decoder_spec(c),
            .attention = {c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, /*qk_norm=*/false,
                          /*bias=*/true, c.rms_norm_eps, /*o_bias=*/true, /*sinks=*/true},
            .rope = c.rope,
            .rotary_dim = c.head_dim,
            .max_position_embeddings = c.max_position_embeddings,
            .layer_windows = c.layer_windows()};
}

GptOssModel::GptOssModel(const GptOssConfig& config, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                         const LoadOptions& options)
    : GqaMoeModel(model_spec(config), std::move(weights), pool, options) {}

std::unique_ptr<Model> GptOssModel::load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                         ThreadPool& pool, const LoadOptions& options) {
    const GptOssConfig c = GptOssConfig::from_json(config);
    return std::make_unique<GptOssModel>(c, open_hf_checkpoint(model_dir, options, "gpt_oss"), pool, options);
}

std::unique_ptr<Model> GptOssModel::load_weights(const io::HfConfig& config,
                                                 std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                                 const LoadOptions& options) {
    return std::make_unique<GptOssModel>(GptOssConfig::from_json(config), std::move(weights), pool, options);
}

}  // namespace moeserve::model
