#include "moeserve/model/mixtral/model.h"

#include <map>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/routing.h"
#include "moeserve/model/mindformers_checkpoint.h"
#include "moeserve/model/mixtral/names.h"

namespace moeserve::model {

namespace kc = kernels::cpu;

namespace {

GqaShape attention_shape(const MixtralConfig& c) {
    return {c.hidden_size,     c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            /*qk_norm=*/false, /*bias=*/false,        c.rms_norm_eps};
}

// The checkpoint under the MoE block's names: w1 / w3 / w2 read as gate_proj / up_proj /
// down_proj (zero-copy aliases; messages still name the tensor in the file).
std::shared_ptr<const io::WeightSource> under_block_names(std::unique_ptr<io::WeightSource> checkpoint) {
    std::map<std::string, std::string> aliases;
    for (const std::string& name : checkpoint->names()) {
        aliases.emplace(mixtral::rename_expert_projection(name, /*to_block=*/true), name);
    }
    return io::WeightSource::renamed(std::move(checkpoint), aliases, {});
}

}  // namespace

DecoderSpec MixtralModel::decoder_spec(const MixtralConfig& c) {
    DecoderSpec s{
        .config = DecoderConfig::of(c),
        .moe = {c.hidden_size, c.num_local_experts, c.num_experts_per_tok, c.intermediate_size, 0, c.intermediate_size},
        .names = {.router = mixtral::kRouter, .experts = mixtral::kExperts},
        .is_moe_layer = [](int64_t) { return true; },
        .route = {}};
    // HF's MixtralSparseMoeBlock: softmax over all experts, top-k, renormalized
    s.route = [e = c.num_local_experts, k = static_cast<int>(c.num_experts_per_tok)](
                  float* logits, int64_t num_tokens, const float*, int32_t* ids, float* weights) {
        kc::softmax_topk(logits, num_tokens, e, k, /*renormalize=*/true, ids, weights);
    };
    return s;
}

MixtralModel::MixtralModel(const MixtralConfig& config, std::shared_ptr<const io::WeightSource> weights,
                           ThreadPool& pool, const LoadOptions& options)
    : config_(config),
      decoder_(decoder_spec(config), std::move(weights), pool, options,
               [&](const io::WeightSource& w, int64_t, const std::string& prefix) {
                   const ParallelConfig& par = options.parallel;
                   attention_.push_back(
                       GqaAttention::load(w, prefix, attention_shape(config), par.tp_rank, par.tp_size, options.quant));
                   return attention_.back().weight_bytes();
               }) {
    const MixtralConfig& c = config_;
    local_kv_heads_ = GqaAttention::local_kv_heads(attention_shape(c), options.parallel.tp_size);
    rope_ = std::make_unique<RotaryEmbedding>(c.rope, c.head_dim, decoder_.rope_length(options),
                                              c.max_position_embeddings, kc::RopeStyle::kNeox);
    decoder_.info().model_type = "mixtral";
    decoder_.info().kv_bytes_per_token =
        GqaKvCache::bytes_per_token(c.num_hidden_layers, local_kv_heads_, c.head_dim, decoder_.kv_dtype());
}

std::unique_ptr<Model> MixtralModel::load(const io::HfConfig& config, const std::filesystem::path& model_dir,
                                          ThreadPool& pool, const LoadOptions& options) {
    const MixtralConfig c = MixtralConfig::from_json(config);
    std::unique_ptr<io::WeightSource> weights = io::WeightSource::open(model_dir);
    if (has_mindformers_names(*weights) || options.quant.checkpoint == CheckpointQuant::kGoldenStick) {
        raise(ErrorCode::kUnsupported,
              "{}: a MindSpore golden-stick / MindFormers checkpoint of mixtral is not supported (moeserve loads "
              "golden-stick A8W8 for deepseek_v3 only)",
              model_dir.string());
    }
    return std::make_unique<MixtralModel>(c, under_block_names(std::move(weights)), pool, options);
}

std::unique_ptr<KvCache> MixtralModel::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    return std::make_unique<GqaKvCache>(config_.num_hidden_layers, num_blocks, block_size, local_kv_heads_,
                                        config_.head_dim, decoder_.kv_dtype());
}

TensorView MixtralModel::forward(const ForwardBatch& batch, KvCache& kv_base) {
    auto& kv = dynamic_cast<GqaKvCache&>(kv_base);
    return decoder_.forward(batch, rope_->num_positions(), [&](size_t i, const float* hs, float* out) {
        attention_[i].forward(decoder_.pool(), hs, batch, kv.layer(static_cast<int64_t>(i)), *rope_, attn_scratch_,
                              out);
    });
}

}  // namespace moeserve::model
