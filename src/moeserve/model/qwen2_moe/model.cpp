#include "moeserve/model/qwen2_moe/model.h"

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/routing.h"
#include "moeserve/model/mindformers_checkpoint.h"

namespace moeserve::model {

namespace kc = kernels::cpu;

namespace {

GqaShape attention_shape(const Qwen2MoeConfig& c) {
    return {c.hidden_size,     c.num_attention_heads, c.num_key_value_heads, c.head_dim(),
            /*qk_norm=*/false, /*bias=*/true,         c.rms_norm_eps};
}

}  // namespace

DecoderSpec Qwen2MoeModel::decoder_spec(const Qwen2MoeConfig& c) {
    DecoderSpec s{.config = DecoderConfig::of(c),
                  .moe = {c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size,
                          c.shared_expert_intermediate_size, c.intermediate_size},
                  .names = {.shared_experts = "mlp.shared_expert.", .shared_expert_gate = "mlp.shared_expert_gate"},
                  .is_moe_layer = [c](int64_t i) { return c.is_moe_layer(i); },
                  .route = {}};
    // softmax over all experts, top-k, renormalized when norm_topk_prob (HF Qwen2MoeSparseMoeBlock)
    s.route = [e = c.num_experts, k = static_cast<int>(c.num_experts_per_tok), norm = c.norm_topk_prob](
                  float* logits, int64_t num_tokens, const float*, int32_t* ids, float* weights) {
        kc::softmax_topk(logits, num_tokens, e, k, norm, ids, weights);
    };
    return s;
}

Qwen2MoeModel::Qwen2MoeModel(const Qwen2MoeConfig& config, std::shared_ptr<const io::WeightSource> weights,
                             ThreadPool& pool, const LoadOptions& options)
    : config_(config),
      decoder_(decoder_spec(config), std::move(weights), pool, options,
               [&](const io::WeightSource& w, int64_t, const std::string& prefix) {
                   const ParallelConfig& par = options.parallel;
                   attention_.push_back(
                       GqaAttention::load(w, prefix, attention_shape(config), par.tp_rank, par.tp_size, options.quant));
                   return attention_.back().weight_bytes();
               }) {
    const Qwen2MoeConfig& c = config_;
    local_kv_heads_ = GqaAttention::local_kv_heads(attention_shape(c), options.parallel.tp_size);
    rope_ = std::make_unique<RotaryEmbedding>(c.rope, c.head_dim(), decoder_.rope_length(options),
                                              c.max_position_embeddings, kc::RopeStyle::kNeox);
    decoder_.info().model_type = "qwen2_moe";
    decoder_.info().kv_bytes_per_token =
        GqaKvCache::bytes_per_token(c.num_hidden_layers, local_kv_heads_, c.head_dim(), decoder_.kv_dtype());
}

std::unique_ptr<Model> Qwen2MoeModel::load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                           ThreadPool& pool, const LoadOptions& options) {
    const Qwen2MoeConfig c = Qwen2MoeConfig::from_json(config);
    std::shared_ptr<const io::WeightSource> weights = io::WeightSource::open(model_dir);
    if (has_mindformers_names(*weights) || options.quant.checkpoint == CheckpointQuant::kGoldenStick) {
        raise(ErrorCode::kUnsupported,
              "{}: a MindSpore golden-stick / MindFormers checkpoint of qwen2_moe is not supported (moeserve loads "
              "golden-stick A8W8 for deepseek_v3 only)",
              model_dir.string());
    }
    return std::make_unique<Qwen2MoeModel>(c, std::move(weights), pool, options);
}

std::unique_ptr<KvCache> Qwen2MoeModel::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    return std::make_unique<GqaKvCache>(config_.num_hidden_layers, num_blocks, block_size, local_kv_heads_,
                                        config_.head_dim(), decoder_.kv_dtype());
}

TensorView Qwen2MoeModel::forward(const ForwardBatch& batch, KvCache& kv_base) {
    auto& kv = dynamic_cast<GqaKvCache&>(kv_base);
    return decoder_.forward(batch, rope_->num_positions(), [&](size_t i, const float* hs, float* out) {
        attention_[i].forward(decoder_.pool(), hs, batch, kv.layer(static_cast<int64_t>(i)), *rope_, attn_scratch_,
                              out);
    });
}

}  // namespace moeserve::model
