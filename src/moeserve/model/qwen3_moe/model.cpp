#include "moeserve/model/qwen3_moe/model.h"

#include <algorithm>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/embedding.h"
#include "moeserve/kernels/cpu/norm.h"
#include "moeserve/kernels/cpu/routing.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace kc = kernels::cpu;

Qwen3MoeModel::Qwen3MoeModel(const Qwen3MoeConfig& config, std::shared_ptr<const io::WeightSource> weights,
                             ThreadPool& pool, const LoadOptions& options)
    : config_(config), weights_(std::move(weights)), pool_(pool) {
    const Qwen3MoeConfig& c = config_;
    const io::WeightSource& w = *weights_;
    const int64_t h = c.hidden_size;
    embed_tokens_ = get_checked(w, "model.embed_tokens.weight", {c.vocab_size, h});
    if (embed_tokens_.dtype != DType::kBF16) {
        raise(ErrorCode::kUnsupported, "model.embed_tokens.weight has dtype {}; only BF16 embeddings are supported",
              dtype_name(embed_tokens_.dtype));
    }
    const GqaShape attn_shape{h, c.num_attention_heads, c.num_key_value_heads, c.head_dim, true, c.attention_bias,
                              c.rms_norm_eps};
    int64_t active_bytes = h * 2;  // one embedding row
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        Layer layer{load_vector_f32(w, p + "input_layernorm.weight", h),
                    load_vector_f32(w, p + "post_attention_layernorm.weight", h),
                    GqaAttention::load(w, p + "self_attn.", attn_shape), c.is_moe_layer(i), {}, {}};
        active_bytes += static_cast<int64_t>(layer.attention.weight_bytes());
        if (layer.is_moe) {
            layer.router = Linear::load(w, p + "mlp.gate", c.num_experts, h);
            std::vector<std::string> prefixes;
            for (int64_t e = 0; e < c.num_experts; ++e) prefixes.push_back(p + "mlp.experts." + std::to_string(e) + ".");
            layer.experts = Experts::load(w, prefixes, h, c.moe_intermediate_size);
            active_bytes += static_cast<int64_t>(layer.router.weight_bytes() +
                                                 layer.experts.bytes_per_expert() *
                                                     static_cast<size_t>(c.num_experts_per_tok));
        } else {
            layer.experts = Experts::load(w, {p + "mlp."}, h, c.intermediate_size);
            active_bytes += static_cast<int64_t>(layer.experts.weight_bytes());
        }
        layers_.push_back(std::move(layer));
    }
    norm_ = load_vector_f32(w, "model.norm.weight", h);
    lm_head_ = Linear::load(w, c.tie_word_embeddings ? "model.embed_tokens" : "lm_head", c.vocab_size, h);
    active_bytes += static_cast<int64_t>(lm_head_.weight_bytes());

    const int64_t max_len = options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
    rope_ = std::make_unique<RotaryEmbedding>(c.rope, c.head_dim, max_len, c.max_position_embeddings,
                                              kc::RopeStyle::kNeox);

    info_.model_type = "qwen3_moe";
    info_.vocab_size = c.vocab_size;
    info_.num_hidden_layers = c.num_hidden_layers;
    info_.max_position_embeddings = c.max_position_embeddings;
    if (c.bos_token_id) info_.bos_token_id = static_cast<int32_t>(*c.bos_token_id);
    for (int64_t id : c.eos_token_id) info_.eos_token_ids.push_back(static_cast<int32_t>(id));
    info_.kv_bytes_per_token = GqaKvCache::bytes_per_token(c.num_hidden_layers, c.num_key_value_heads, c.head_dim);
    for (const auto& name : w.names()) {
        const TensorView t = w.get(name);
        info_.weight_bytes += static_cast<int64_t>(t.nbytes());
        info_.num_parameters += t.numel();
    }
    info_.active_weight_bytes_per_token = active_bytes;
}

std::unique_ptr<KvCache> Qwen3MoeModel::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    return std::make_unique<GqaKvCache>(config_.num_hidden_layers, num_blocks, block_size, config_.num_key_value_heads,
                                        config_.head_dim);
}

void Qwen3MoeModel::moe_forward(const Layer& layer, const float* h, int64_t num_tokens, float* out) {
    if (!layer.is_moe) {
        layer.experts.forward_dense(pool_, h, num_tokens, moe_scratch_, dense_ids_, dense_weights_, out);
        return;
    }
    const int64_t e = config_.num_experts;
    const int k = static_cast<int>(config_.num_experts_per_tok);
    router_logits_.resize(static_cast<size_t>(num_tokens * e));
    topk_ids_.resize(static_cast<size_t>(num_tokens * k));
    topk_weights_.resize(static_cast<size_t>(num_tokens * k));
    // 1. router: [T, hidden] -> [T, E]; softmax over all experts, top-k, renormalize
    layer.router.forward(pool_, h, num_tokens, router_logits_.data());
    kc::softmax_topk(router_logits_.data(), num_tokens, e, k, config_.norm_topk_prob, topk_ids_.data(),
                     topk_weights_.data());
    // 2. experts: [T, hidden] -> [T, hidden], weighted sum over each token's k experts
    layer.experts.forward(pool_, h, num_tokens, topk_ids_.data(), topk_weights_.data(), k, moe_scratch_, out);
}

TensorView Qwen3MoeModel::forward(const ForwardBatch& batch, KvCache& kv_base) {
    auto& kv = dynamic_cast<GqaKvCache&>(kv_base);
    const Qwen3MoeConfig& c = config_;
    const int64_t t = batch.num_tokens();
    const int64_t h = c.hidden_size;
    const auto eps = static_cast<float>(c.rms_norm_eps);
    MOESERVE_CHECK(t > 0 && batch.positions.size() == static_cast<size_t>(t) &&
                       batch.slot_mapping.size() == static_cast<size_t>(t),
                   "malformed batch: {} tokens, {} positions, {} slots", t, batch.positions.size(),
                   batch.slot_mapping.size());
    for (int32_t pos : batch.positions) {
        MOESERVE_CHECK(pos >= 0 && pos < rope_->num_positions(), "position {} outside [0, {})", pos,
                       rope_->num_positions());
    }
    for (int32_t id : batch.token_ids) {
        MOESERVE_CHECK(id >= 0 && id < c.vocab_size, "token id {} outside [0, {})", id, c.vocab_size);
    }
    x_.resize(static_cast<size_t>(t * h));
    h_.resize(static_cast<size_t>(t * h));
    tmp_.resize(static_cast<size_t>(t * h));
    float* x = x_.data();     // residual stream [T, hidden]
    float* hs = h_.data();    // normed input of the current block [T, hidden]
    float* out = tmp_.data(); // block output [T, hidden]

    // 1. embedding: ids [T] -> x [T, hidden]
    kc::embedding_bf16(embed_tokens_.as<const uint16_t>(), c.vocab_size, h, batch.token_ids.data(), t, x);
    kc::rms_norm(pool_, x, layers_[0].input_layernorm.as<float>(), t, h, eps, hs);
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Layer& layer = layers_[i];
        // 2. attention block: x += o_proj(attn(norm(x)))
        layer.attention.forward(pool_, hs, batch, kv.layer(static_cast<int64_t>(i)), *rope_, attn_scratch_, out);
        kc::add_rms_norm(pool_, x, out, layer.post_attention_layernorm.as<float>(), t, h, eps, hs);
        // 3. MoE / MLP block: x += mlp(norm(x)); fused with the next layer's input norm
        moe_forward(layer, hs, t, out);
        const float* next_norm = i + 1 < layers_.size() ? layers_[i + 1].input_layernorm.as<float>() : norm_.as<float>();
        kc::add_rms_norm(pool_, x, out, next_norm, t, h, eps, hs);
    }
    // 4. final norm (done above) on the rows that need logits -> lm_head [R, vocab]
    const auto r = static_cast<int64_t>(batch.logits_rows.size());
    final_rows_.resize(static_cast<size_t>(std::max<int64_t>(r, 1) * h));
    for (int64_t j = 0; j < r; ++j) {
        const int32_t row = batch.logits_rows[static_cast<size_t>(j)];
        MOESERVE_CHECK(row >= 0 && row < t, "logits row {} outside [0, {})", row, t);
        std::copy_n(hs + row * h, h, final_rows_.data() + j * h);
    }
    if (logits_.numel() < r * c.vocab_size) logits_ = Tensor(DType::kF32, {std::max<int64_t>(r, 1), c.vocab_size});
    lm_head_.forward(pool_, final_rows_.data(), r, logits_.as<float>());
    return TensorView{logits_.data(), DType::kF32, Shape{r, c.vocab_size}};
}

}  // namespace moeserve::model
