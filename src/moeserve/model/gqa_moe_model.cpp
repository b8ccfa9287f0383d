#include "moeserve/model/gqa_moe_model.h"

#include "moeserve/core/error.h"
#include "moeserve/model/formats/mindformers_checkpoint.h"

namespace moeserve::model {

GqaMoeModel::GqaMoeModel(GqaModelSpec spec, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                         const LoadOptions& options)
    : spec_(std::move(spec)),
      decoder_(spec_.decoder, std::move(weights), pool, options,
               [&](const io::WeightSource& w, int64_t layer, const std::string& prefix) {
                   const ParallelConfig& par = options.parallel;
                   const auto& windows = spec_.layer_windows;
                   // the draft layer (index num_hidden_layers) attends fully
                   const int64_t window = layer < static_cast<int64_t>(windows.size()) ? windows[size_t(layer)] : 0;
                   attention_.push_back(
                       GqaAttention::load(w, prefix, spec_.attention, par.tp_rank, par.tp_size, options.quant, window));
                   return attention_.back().weight_bytes();
               }) {
    const GqaShape& a = spec_.attention;
    kv_heads_ = GqaAttention::kv_heads(a, options.parallel.tp_rank, options.parallel.tp_size);
    rope_ = std::make_unique<RotaryEmbedding>(spec_.rope, spec_.rotary_dim, decoder_.rope_length(options),
                                              spec_.max_position_embeddings, spec_.rope_style);
    decoder_.info().model_type = spec_.model_type;
    decoder_.info().kv_bytes_per_token = GqaKvCache::bytes_per_token(spec_.decoder.config.num_hidden_layers,
                                                                     kv_heads_.count, a.head_dim, decoder_.kv_dtype());
}

std::unique_ptr<KvCache> GqaMoeModel::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    return std::make_unique<GqaKvCache>(spec_.decoder.config.num_hidden_layers, num_blocks, block_size, kv_heads_.count,
                                        spec_.attention.head_dim, decoder_.kv_dtype(), kv_heads_);
}

TensorView GqaMoeModel::forward(const ForwardBatch& batch, KvCache& kv_base) {
    auto& kv = dynamic_cast<GqaKvCache&>(kv_base);
    return decoder_.forward(batch, rope_->num_positions(), [&](size_t i, const float* hs, float* out) {
        attention_[i].forward(decoder_.pool(), hs, batch, kv.layer(static_cast<int64_t>(i)), *rope_, attn_scratch_,
                              out);
    });
}

std::unique_ptr<io::WeightSource> open_hf_checkpoint(const std::filesystem::path& model_dir, const LoadOptions& options,
                                                     const std::string& model_type) {
    std::unique_ptr<io::WeightSource> weights = io::WeightSource::open(model_dir);
    if (has_mindformers_names(*weights) || options.quant.checkpoint == CheckpointQuant::kGoldenStick) {
        // NOTE(#20): the formats' spec (docs/quantization.md) maps DeepSeek-V3 MindFormers names only
        raise(ErrorCode::kUnsupported,
              "{}: a MindSpore golden-stick / MindFormers checkpoint of {} is not supported (moeserve loads "
              "golden-stick A8W8 for deepseek_v3 only); convert it to HF names first",
              model_dir.string(), model_type);
    }
    return weights;
}

}  // namespace moeserve::model
