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
    : config_(config), par_(options.parallel), kv_dtype_(options.kv_dtype), weights_(std::move(weights)), pool_(pool) {
    const Qwen3MoeConfig& c = config_;
    const io::WeightSource& w = *weights_;
    const int64_t h = c.hidden_size;
    // Shards of this rank (parallel_config.h): vocabulary rows and routed experts.
    vocab_shard_ = shard_range(c.vocab_size, par_.tp_size, par_.tp_rank);
    expert_shard_ = local_experts(par_, c.num_experts);
    const ShardRange moe_inter = local_moe_inter(par_, c.moe_intermediate_size);
    if (c.intermediate_size % par_.tp_size != 0) {
        raise(ErrorCode::kInvalidArgument, "intermediate_size ({}) must be divisible by tensor-parallel-size ({})",
              c.intermediate_size, par_.tp_size);
    }
    const ShardRange dense_inter = shard_range(c.intermediate_size, par_.tp_size, par_.tp_rank);
    int64_t rank_bytes = 0;
    embed_tokens_ = get_checked(w, "model.embed_tokens.weight", {c.vocab_size, h})
                        .rows(vocab_shard_.begin, vocab_shard_.begin + vocab_shard_.count);
    if (embed_tokens_.dtype != DType::kBF16) {
        raise(ErrorCode::kUnsupported, "model.embed_tokens.weight has dtype {}; only BF16 embeddings are supported",
              dtype_name(embed_tokens_.dtype));
    }
    embed_tokens_ = widen_to_f32_if(embed_tokens_, options.quant.f32_weights, embed_owned_);
    rank_bytes += static_cast<int64_t>(embed_tokens_.nbytes());
    const GqaShape attn_shape{h,    c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                              true, c.attention_bias,      c.rms_norm_eps};
    int64_t active_bytes = h * static_cast<int64_t>(dtype_size(embed_tokens_.dtype));  // one embedding row
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        Layer layer{load_vector_f32(w, p + "input_layernorm.weight", h),
                    load_vector_f32(w, p + "post_attention_layernorm.weight", h),
                    GqaAttention::load(w, p + "self_attn.", attn_shape, par_.tp_rank, par_.tp_size, options.quant),
                    c.is_moe_layer(i),
                    {},
                    {},
                    {},
                    {}};
        active_bytes += static_cast<int64_t>(layer.attention.weight_bytes());
        rank_bytes += static_cast<int64_t>(layer.attention.weight_bytes()) + 2 * h * 4;
        if (layer.is_moe) {
            layer.router = Linear::load(w, p + "mlp.gate", c.num_experts, h, false, options.quant);
            std::vector<std::string> prefixes;
            for (int64_t e = expert_shard_.begin; e < expert_shard_.begin + expert_shard_.count; ++e) {
                prefixes.push_back(p + "mlp.experts." + std::to_string(e) + ".");
            }
            layer.experts = Experts::load(w, prefixes, h, c.moe_intermediate_size, expert_shard_.begin, moe_inter.begin,
                                          moe_inter.count, options.quant);
            active_bytes +=
                static_cast<int64_t>(layer.router.weight_bytes() +
                                     layer.experts.bytes_per_expert() * static_cast<size_t>(c.num_experts_per_tok));
            rank_bytes += static_cast<int64_t>(layer.router.weight_bytes());
        } else {
            layer.experts = Experts::load(w, {p + "mlp."}, h, c.intermediate_size, 0, dense_inter.begin,
                                          dense_inter.count, options.quant);
            active_bytes += static_cast<int64_t>(layer.experts.weight_bytes());
        }
        rank_bytes += static_cast<int64_t>(layer.experts.weight_bytes());
        layer.input_layernorm_bias = load_optional_vector_f32(w, p + "input_layernorm.bias", h);
        layer.post_attention_layernorm_bias = load_optional_vector_f32(w, p + "post_attention_layernorm.bias", h);
        layers_.push_back(std::move(layer));
    }
    norm_ = load_vector_f32(w, "model.norm.weight", h);
    if (w.contains("model.norm.bias")) {
        raise(ErrorCode::kUnsupported, "model.norm.bias: a bias on the final norm is not supported");
    }
    lm_head_ = Linear::load_shard(w, c.tie_word_embeddings ? "model.embed_tokens" : "lm_head", c.vocab_size, h,
                                  {vocab_shard_.begin, vocab_shard_.count, 0, -1}, false, options.quant);
    active_bytes += static_cast<int64_t>(lm_head_.weight_bytes());
    if (!c.tie_word_embeddings) rank_bytes += static_cast<int64_t>(lm_head_.weight_bytes());
    rank_bytes += h * 4;
    local_kv_heads_ = GqaAttention::local_kv_heads(attn_shape, par_.tp_size);

    const int64_t max_len = options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
    rope_ =
        std::make_unique<RotaryEmbedding>(c.rope, c.head_dim, max_len, c.max_position_embeddings, kc::RopeStyle::kNeox);

    info_.model_type = "qwen3_moe";
    info_.vocab_size = c.vocab_size;
    info_.num_hidden_layers = c.num_hidden_layers;
    info_.max_position_embeddings = c.max_position_embeddings;
    if (c.bos_token_id) info_.bos_token_id = static_cast<int32_t>(*c.bos_token_id);
    for (int64_t id : c.eos_token_id) info_.eos_token_ids.push_back(static_cast<int32_t>(id));
    info_.kv_bytes_per_token = GqaKvCache::bytes_per_token(c.num_hidden_layers, local_kv_heads_, c.head_dim, kv_dtype_);
    for (const auto& name : w.names()) {
        const TensorView t = w.get(name);
        info_.weight_bytes += static_cast<int64_t>(t.nbytes());
        info_.num_parameters += t.numel();
    }
    info_.rank_weight_bytes = rank_bytes;
    if (!par_.is_single()) info_.weight_bytes = rank_bytes;  // what this rank holds
    info_.active_weight_bytes_per_token = active_bytes;
    info_.quantization = options.quant.describe();
}

std::unique_ptr<KvCache> Qwen3MoeModel::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    return std::make_unique<GqaKvCache>(config_.num_hidden_layers, num_blocks, block_size, local_kv_heads_,
                                        config_.head_dim, kv_dtype_);
}

void Qwen3MoeModel::moe_forward(const Layer& layer, const float* h, int64_t num_tokens,
                                parallel::MoeExchangeKind exchange, float* out) {
    if (!layer.is_moe) {
        // dense MLP: column-parallel gate/up, row-parallel down -> partial sums over TP
        layer.experts.forward_dense(pool_, h, num_tokens, moe_scratch_, dense_ids_, dense_weights_, out);
        tp_all_reduce(par_, out, num_tokens * config_.hidden_size);
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
    // 2. experts: [T, hidden] -> [T, hidden], weighted sum over each token's k experts (EP: by
    //    dispatch/combine over the EP group; TP-split experts: all-reduced partial sums)
    parallel_moe_.forward(pool_, layer.experts, par_,
                          {h, num_tokens, topk_ids_.data(), topk_weights_.data(), k, exchange},
                          std::max<int64_t>(expert_shard_.count, 1), moe_scratch_, out);
}

TensorView Qwen3MoeModel::forward(const ForwardBatch& batch, KvCache& kv_base) {
    auto& kv = dynamic_cast<GqaKvCache&>(kv_base);
    const Qwen3MoeConfig& c = config_;
    const int64_t t = batch.num_tokens();
    const int64_t h = c.hidden_size;
    const auto eps = static_cast<float>(c.rms_norm_eps);
    check_forward_batch(batch, c.vocab_size, rope_->num_positions());
    x_.resize(static_cast<size_t>(t * h));
    h_.resize(static_cast<size_t>(t * h));
    tmp_.resize(static_cast<size_t>(t * h));
    float* x = x_.data();      // residual stream [T, hidden]
    float* hs = h_.data();     // normed input of the current block [T, hidden]
    float* out = tmp_.data();  // block output [T, hidden]

    // 1. embedding: ids [T] -> x [T, hidden]
    embed_vocab_parallel(par_, embed_tokens_, vocab_shard_, h, batch.token_ids.data(), t, x);
    kc::rms_norm(pool_, x, layers_[0].input_layernorm.as<float>(), t, h, eps, hs);
    add_row_bias(layers_[0].input_layernorm_bias, hs, t, h);
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Layer& layer = layers_[i];
        // 2. attention block: x += o_proj(attn(norm(x)))
        layer.attention.forward(pool_, hs, batch, kv.layer(static_cast<int64_t>(i)), *rope_, attn_scratch_, out);
        tp_all_reduce(par_, out, t * h);  // row-parallel o_proj: partial sums over TP
        kc::add_rms_norm(pool_, x, out, layer.post_attention_layernorm.as<float>(), t, h, eps, hs);
        add_row_bias(layer.post_attention_layernorm_bias, hs, t, h);
        // 3. MoE / MLP block: x += mlp(norm(x)); fused with the next layer's input norm
        moe_forward(layer, hs, t, batch.moe_exchange, out);
        const float* next_norm =
            i + 1 < layers_.size() ? layers_[i + 1].input_layernorm.as<float>() : norm_.as<float>();
        kc::add_rms_norm(pool_, x, out, next_norm, t, h, eps, hs);
        if (i + 1 < layers_.size()) add_row_bias(layers_[i + 1].input_layernorm_bias, hs, t, h);
    }
    // 4. final norm (done above) on the rows that need logits -> lm_head [R, vocab]
    return compute_logits(par_, pool_, lm_head_, c.vocab_size, hs, h, batch.logits_rows, logits_scratch_);
}

}  // namespace moeserve::model
