#include "moeserve/model/deepseek_v3/model.h"

#include <string>

#include "moeserve/core/error.h"
#include "moeserve/model/layers/routing.h"
#include "moeserve/model/formats/mindformers_checkpoint.h"

namespace moeserve::model {

DecoderSpec DeepseekV3Model::decoder_spec(const DeepseekV3Config& c) {
    DecoderSpec s{.config = DecoderConfig::of(c),
                  .moe = {c.hidden_size, c.n_routed_experts, c.num_experts_per_tok, c.moe_intermediate_size,
                          c.n_shared_experts * c.moe_intermediate_size, c.intermediate_size},
                  .names = {.router_bias = "mlp.gate.e_score_correction_bias", .shared_experts = "mlp.shared_experts."},
                  .is_moe_layer = [c](int64_t i) { return c.is_moe_layer(i); },
                  .route = {}};
    // The router as the config asks (reference: tests/reference/deepseek_v3_ref.py route()).
    s.route = grouped_topk_rule({.num_experts = c.n_routed_experts,
                                 .k = static_cast<int>(c.num_experts_per_tok),
                                 .scoring_func = c.scoring_func,
                                 .topk_method = c.topk_method,
                                 .n_group = c.n_group,
                                 .topk_group = c.topk_group,
                                 .norm_topk_prob = c.norm_topk_prob,
                                 .routed_scaling_factor = c.routed_scaling_factor,
                                 .v2_gate = c.model_type == "deepseek_v2"});
    return s;
}

namespace {

MlaShape attention_shape(const DeepseekV3Config& c) {
    return {c.hidden_size,      c.num_attention_heads, c.q_lora_rank.value_or(0), c.kv_lora_rank, c.qk_nope_head_dim,
            c.qk_rope_head_dim, c.v_head_dim,          c.softmax_scale(),         1e-6,           c.attention_bias};
}

}  // namespace

DeepseekV3Model::DeepseekV3Model(const DeepseekV3Config& config, std::shared_ptr<const io::WeightSource> weights,
                                 ThreadPool& pool, const LoadOptions& options)
    : config_(config),
      decoder_(decoder_spec(config), std::move(weights), pool, options,
               [&, shape = attention_shape(config)](const io::WeightSource& w, int64_t, const std::string& prefix) {
                   attention_.push_back(MlaAttention::load(w, prefix, shape, options.parallel.tp_rank,
                                                           options.parallel.tp_size, options.quant));
                   return attention_.back().weight_bytes();
               }) {
    const DeepseekV3Config& c = config_;
    RopeScaling rope = c.rope;
    if (rope.rope_type == "yarn") rope.attention_factor = c.rope_attention_factor();  // DeepSeek's rule
    rope_ = std::make_unique<RotaryEmbedding>(
        rope, c.qk_rope_head_dim, decoder_.rope_length(options), c.max_position_embeddings,
        c.rope_interleave ? kernels::RopeStyle::kInterleaved : kernels::RopeStyle::kNeox);
    ModelInfo& info = decoder_.info();
    info.model_type = c.model_type;
    info.kv_bytes_per_token =
        MlaKvCache::bytes_per_token(kv_layers(), c.kv_lora_rank, c.qk_rope_head_dim, decoder_.kv_dtype());
}

std::unique_ptr<Model> DeepseekV3Model::load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                             ThreadPool& pool, const LoadOptions& options) {
    const DeepseekV3Config c = DeepseekV3Config::from_json(config);
    std::unique_ptr<io::WeightSource> weights = io::WeightSource::open(model_dir);
    LoadOptions resolved = options;
    if (resolve_golden_stick(*weights, config, options.quantization, resolved.quant, model_dir.string())) {
        weights = mindformers_deepseek_as_hf(std::move(weights), c);
    }
    return std::make_unique<DeepseekV3Model>(c, std::shared_ptr<const io::WeightSource>(std::move(weights)), pool,
                                             resolved);
}

std::unique_ptr<Model> DeepseekV3Model::load_weights(const io::HfConfig& config,
                                                     std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                                                     const LoadOptions& options) {
    return std::make_unique<DeepseekV3Model>(DeepseekV3Config::from_json(config), std::move(weights), pool, options);
}

int64_t DeepseekV3Model::full_kv_bytes_per_token() const {
    const DeepseekV3Config& c = config_;
    return c.num_hidden_layers * c.num_attention_heads * (c.qk_head_dim() + c.v_head_dim) *
           static_cast<int64_t>(sizeof(float));
}

std::unique_ptr<KvCache> DeepseekV3Model::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    return std::make_unique<MlaKvCache>(kv_layers(), num_blocks, block_size, config_.kv_lora_rank,
                                        config_.qk_rope_head_dim, decoder_.kv_dtype());
}

MoeDecoder::AttentionStep DeepseekV3Model::attention_step(const ForwardBatch& batch, KvCache& kv_base) {
    auto& kv = dynamic_cast<MlaKvCache&>(kv_base);
    return [this, &batch, &kv](size_t i, const float* hs, float* out) {
        attention_[i].forward(decoder_.pool(), hs, batch, kv.layer(static_cast<int64_t>(i)), *rope_, path_,
                              attn_scratch_, out);
    };
}

TensorView DeepseekV3Model::forward(const ForwardBatch& batch, KvCache& kv) {
    return decoder_.forward(batch, rope_->num_positions(), attention_step(batch, kv));
}

TensorView DeepseekV3Model::forward_draft(const ForwardBatch& batch, KvCache& kv) {
    return decoder_.forward_draft(batch, rope_->num_positions(), attention_step(batch, kv));
}

}  // namespace moeserve::model
