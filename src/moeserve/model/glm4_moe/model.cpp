#include "moeserve/model/glm4_moe/model.h"

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/routing_grouped.h"
#include "moeserve/model/mindformers_checkpoint.h"

namespace moeserve::model {

namespace kc = kernels::cpu;

namespace {

GqaShape attention_shape(const Glm4MoeConfig& c) {
    return {c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.use_qk_norm, c.attention_bias,      c.rms_norm_eps};
}

}  // namespace

DecoderSpec Glm4MoeModel::decoder_spec(const Glm4MoeConfig& c) {
    DecoderSpec s{.config = DecoderConfig::of(c),
                  .moe = {c.hidden_size, c.n_routed_experts, c.num_experts_per_tok, c.moe_intermediate_size,
                          c.n_shared_experts * c.moe_intermediate_size, c.intermediate_size},
                  .names = {.router_bias = "mlp.gate.e_score_correction_bias", .shared_experts = "mlp.shared_experts."},
                  .is_moe_layer = [c](int64_t i) { return c.is_moe_layer(i); },
                  .route = {}};
    // HF Glm4MoeTopkRouter is DeepSeek-V3's: sigmoid, bias for the choice, top-2-sum groups,
    // renormalized when norm_topk_prob, then scaled
    kc::GroupedTopkArgs args{};
    args.num_experts = c.n_routed_experts;
    args.k = static_cast<int>(c.num_experts_per_tok);
    args.scoring = kc::RouterScoring::kSigmoid;
    args.group_score = kc::GroupScore::kTop2Sum;
    args.n_group = c.n_group;
    args.topk_group = c.topk_group;
    args.renormalize = c.norm_topk_prob;
    args.scale = static_cast<float>(c.routed_scaling_factor);
    // Each copy of the rule owns its buffers (the forward's thread calls it, one layer at a time).
    s.route = [args, scratch = kc::GroupedTopkScratch{}](float* logits, int64_t num_tokens, const float* bias,
                                                         int32_t* ids, float* weights) mutable {
        kc::GroupedTopkArgs a = args;
        a.bias = bias;
        kc::grouped_topk(logits, num_tokens, a, ids, weights, scratch);
    };
    return s;
}

Glm4MoeModel::Glm4MoeModel(const Glm4MoeConfig& config, std::shared_ptr<const io::WeightSource> weights,
                           ThreadPool& pool, const LoadOptions& options)
    : config_(config),
      decoder_(decoder_spec(config), std::move(weights), pool, options,
               [&](const io::WeightSource& w, int64_t, const std::string& prefix) {
                   const ParallelConfig& par = options.parallel;
                   attention_.push_back(
                       GqaAttention::load(w, prefix, attention_shape(config), par.tp_rank, par.tp_size, options.quant));
                   return attention_.back().weight_bytes();
               }) {
    const Glm4MoeConfig& c = config_;
    local_kv_heads_ = GqaAttention::local_kv_heads(attention_shape(c), options.parallel.tp_size);
    // the first rotary_dim dims of each head rotate (rotate-half over them), the rest pass
    rope_ = std::make_unique<RotaryEmbedding>(c.rope, c.rotary_dim(), decoder_.rope_length(options),
                                              c.max_position_embeddings, kc::RopeStyle::kNeox);
    decoder_.info().model_type = "glm4_moe";
    decoder_.info().kv_bytes_per_token =
        GqaKvCache::bytes_per_token(c.num_hidden_layers, local_kv_heads_, c.head_dim, decoder_.kv_dtype());
}

std::unique_ptr<Model> Glm4MoeModel::load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                          ThreadPool& pool, const LoadOptions& options) {
    const Glm4MoeConfig c = Glm4MoeConfig::from_json(config);
    std::shared_ptr<const io::WeightSource> weights = io::WeightSource::open(model_dir);
    if (has_mindformers_names(*weights) || options.quant.checkpoint == CheckpointQuant::kGoldenStick) {
        raise(ErrorCode::kUnsupported,
              "{}: a MindSpore golden-stick / MindFormers checkpoint of glm4_moe is not supported (moeserve loads "
              "golden-stick A8W8 for deepseek_v3 only)",
              model_dir.string());
    }
    return std::make_unique<Glm4MoeModel>(c, std::move(weights), pool, options);
}

std::unique_ptr<KvCache> Glm4MoeModel::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    return std::make_unique<GqaKvCache>(config_.num_hidden_layers, num_blocks, block_size, local_kv_heads_,
                                        config_.head_dim, decoder_.kv_dtype());
}

TensorView Glm4MoeModel::forward(const ForwardBatch& batch, KvCache& kv_base) {
    auto& kv = dynamic_cast<GqaKvCache&>(kv_base);
    return decoder_.forward(batch, rope_->num_positions(), [&](size_t i, const float* hs, float* out) {
        attention_[i].forward(decoder_.pool(), hs, batch, kv.layer(static_cast<int64_t>(i)), *rope_, attn_scratch_,
                              out);
    });
}

}  // namespace moeserve::model
