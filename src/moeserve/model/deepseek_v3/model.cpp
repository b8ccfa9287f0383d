#include "moeserve/model/deepseek_v3/model.h"

#include <algorithm>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/embedding.h"
#include "moeserve/kernels/cpu/norm.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace kc = kernels::cpu;

namespace {
// The router as the config asks (reference: tests/reference/deepseek_v3_ref.py route()).
kc::GroupedTopkArgs routing_args(const DeepseekV3Config& c) {
    kc::GroupedTopkArgs a{};
    a.num_experts = c.n_routed_experts;
    a.k = static_cast<int>(c.num_experts_per_tok);
    a.scoring = c.scoring_func == "sigmoid" ? kc::RouterScoring::kSigmoid : kc::RouterScoring::kSoftmax;
    a.group_score = c.topk_method == "noaux_tc"               ? kc::GroupScore::kTop2Sum
                    : c.topk_method == "group_limited_greedy" ? kc::GroupScore::kMax
                                                              : kc::GroupScore::kNone;
    a.n_group = c.n_group;
    a.topk_group = c.topk_group;
    if (c.model_type == "deepseek_v3") {  // HF V3: normalize if asked, then always scale
        a.renormalize = c.norm_topk_prob;
        a.scale = static_cast<float>(c.routed_scaling_factor);
    } else {  // DeepSeek's V2 MoEGate: normalize (k > 1) or scale, not both
        a.renormalize = c.num_experts_per_tok > 1 && c.norm_topk_prob;
        a.scale = a.renormalize ? 1.0f : static_cast<float>(c.routed_scaling_factor);
    }
    return a;
}
}  // namespace

DeepseekV3Model::DeepseekV3Model(const DeepseekV3Config& config, std::shared_ptr<const io::WeightSource> weights,
                                 ThreadPool& pool, const LoadOptions& options)
    : config_(config),
      par_(options.parallel),
      kv_dtype_(options.kv_dtype),
      weights_(std::move(weights)),
      pool_(pool),
      routing_(routing_args(config)) {
    const DeepseekV3Config& c = config_;
    const io::WeightSource& w = *weights_;
    const int64_t h = c.hidden_size;
    // Shards of this rank (parallel_config.h).
    vocab_shard_ = shard_range(c.vocab_size, par_.tp_size, par_.tp_rank);
    expert_shard_ = local_experts(par_, c.n_routed_experts);
    const ShardRange moe_inter = local_moe_inter(par_, c.moe_intermediate_size);
    const int64_t shared_inter = c.n_shared_experts * c.moe_intermediate_size;
    if (c.intermediate_size % par_.tp_size != 0 || shared_inter % par_.tp_size != 0) {
        raise(ErrorCode::kInvalidArgument,
              "intermediate_size ({}) and the shared experts' size ({}) must be divisible by tensor-parallel-size "
              "({})",
              c.intermediate_size, shared_inter, par_.tp_size);
    }
    const ShardRange dense_inter = shard_range(c.intermediate_size, par_.tp_size, par_.tp_rank);
    const ShardRange shared_shard = shard_range(shared_inter, par_.tp_size, par_.tp_rank);
    int64_t rank_bytes = h * 4;
    embed_tokens_ = get_checked(w, "model.embed_tokens.weight", {c.vocab_size, h})
                        .rows(vocab_shard_.begin, vocab_shard_.begin + vocab_shard_.count);
    if (embed_tokens_.dtype != DType::kBF16) {
        raise(ErrorCode::kUnsupported, "model.embed_tokens.weight has dtype {}; only BF16 embeddings are supported",
              dtype_name(embed_tokens_.dtype));
    }
    embed_tokens_ = widen_to_f32_if(embed_tokens_, options.quant.f32_weights, embed_owned_);
    rank_bytes += static_cast<int64_t>(embed_tokens_.nbytes());
    const MlaShape attn_shape{h,
                              c.num_attention_heads,
                              c.q_lora_rank.value_or(0),
                              c.kv_lora_rank,
                              c.qk_nope_head_dim,
                              c.qk_rope_head_dim,
                              c.v_head_dim,
                              c.softmax_scale(),
                              1e-6,
                              c.attention_bias};
    int64_t active_bytes = h * static_cast<int64_t>(dtype_size(embed_tokens_.dtype));  // one embedding row
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        Layer layer{load_vector_f32(w, p + "input_layernorm.weight", h),
                    load_vector_f32(w, p + "post_attention_layernorm.weight", h),
                    MlaAttention::load(w, p + "self_attn.", attn_shape, par_.tp_rank, par_.tp_size, options.quant),
                    c.is_moe_layer(i),
                    {},
                    {},
                    {},
                    {},
                    {},
                    {}};
        active_bytes += static_cast<int64_t>(layer.attention.weight_bytes());
        if (layer.is_moe) {
            layer.gate = Linear::load(w, p + "mlp.gate", c.n_routed_experts, h, false, options.quant);
            const std::string bias_name = p + "mlp.gate.e_score_correction_bias";
            if (w.contains(bias_name)) layer.score_bias = load_vector_f32(w, bias_name, c.n_routed_experts);
            std::vector<std::string> prefixes;
            for (int64_t e = expert_shard_.begin; e < expert_shard_.begin + expert_shard_.count; ++e)
                prefixes.push_back(p + "mlp.experts." + std::to_string(e) + ".");
            layer.experts = Experts::load(w, prefixes, h, c.moe_intermediate_size, expert_shard_.begin, moe_inter.begin,
                                          moe_inter.count, options.quant);
            if (c.n_shared_experts > 0) {
                layer.shared = Experts::load(w, {p + "mlp.shared_experts."}, h, shared_inter, 0, shared_shard.begin,
                                             shared_shard.count, options.quant);
            }
            rank_bytes += static_cast<int64_t>(layer.gate.weight_bytes() + layer.shared.weight_bytes());
            active_bytes +=
                static_cast<int64_t>(layer.gate.weight_bytes() + layer.shared.weight_bytes() +
                                     layer.experts.bytes_per_expert() * static_cast<size_t>(c.num_experts_per_tok));
        } else {
            layer.experts = Experts::load(w, {p + "mlp."}, h, c.intermediate_size, 0, dense_inter.begin,
                                          dense_inter.count, options.quant);
            active_bytes += static_cast<int64_t>(layer.experts.weight_bytes());
        }
        rank_bytes += static_cast<int64_t>(layer.attention.weight_bytes() + layer.experts.weight_bytes()) + 2 * h * 4;
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

    const int64_t max_len = options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
    RopeScaling rope = c.rope;
    if (rope.rope_type == "yarn") rope.attention_factor = c.rope_attention_factor();  // DeepSeek's rule
    rope_ = std::make_unique<RotaryEmbedding>(rope, c.qk_rope_head_dim, max_len, c.max_position_embeddings,
                                              c.rope_interleave ? kc::RopeStyle::kInterleaved : kc::RopeStyle::kNeox);

    info_.model_type = c.model_type;
    info_.vocab_size = c.vocab_size;
    info_.num_hidden_layers = c.num_hidden_layers;
    info_.max_position_embeddings = c.max_position_embeddings;
    if (c.bos_token_id) info_.bos_token_id = static_cast<int32_t>(*c.bos_token_id);
    for (int64_t id : c.eos_token_id) info_.eos_token_ids.push_back(static_cast<int32_t>(id));
    info_.kv_bytes_per_token =
        MlaKvCache::bytes_per_token(c.num_hidden_layers, c.kv_lora_rank, c.qk_rope_head_dim, kv_dtype_);
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

int64_t DeepseekV3Model::full_kv_bytes_per_token() const {
    const DeepseekV3Config& c = config_;
    return c.num_hidden_layers * c.num_attention_heads * (c.qk_head_dim() + c.v_head_dim) *
           static_cast<int64_t>(sizeof(float));
}

std::unique_ptr<KvCache> DeepseekV3Model::create_kv_cache(int64_t num_blocks, int64_t block_size) const {
    return std::make_unique<MlaKvCache>(config_.num_hidden_layers, num_blocks, block_size, config_.kv_lora_rank,
                                        config_.qk_rope_head_dim, kv_dtype_);
}

void DeepseekV3Model::mlp_forward(const Layer& layer, const float* h, int64_t num_tokens,
                                  parallel::MoeExchangeKind exchange, float* out) {
    if (!layer.is_moe) {
        // dense MLP: column-parallel gate/up, row-parallel down -> partial sums over TP
        layer.experts.forward_dense(pool_, h, num_tokens, moe_scratch_, dense_ids_, dense_weights_, out);
        tp_all_reduce(par_, out, num_tokens * config_.hidden_size);
        return;
    }
    const int64_t e = config_.n_routed_experts;
    const int k = routing_.k;
    router_logits_.resize(static_cast<size_t>(num_tokens * e));
    topk_ids_.resize(static_cast<size_t>(num_tokens * k));
    topk_weights_.resize(static_cast<size_t>(num_tokens * k));
    // 1. router: [T, hidden] -> [T, E] -> grouped top-k ids and weights [T, k]
    layer.gate.forward(pool_, h, num_tokens, router_logits_.data());
    kc::GroupedTopkArgs args = routing_;
    args.bias = layer.score_bias.empty() ? nullptr : layer.score_bias.as<float>();
    kc::grouped_topk(router_logits_.data(), num_tokens, args, topk_ids_.data(), topk_weights_.data());
    // 2. routed experts, weighted sum -> out [T, hidden] (EP dispatch/combine, or TP-split + all-reduce)
    parallel_moe_.forward(pool_, layer.experts, par_,
                          {h, num_tokens, topk_ids_.data(), topk_weights_.data(), k, exchange},
                          std::max<int64_t>(expert_shard_.count, 1), moe_scratch_, out);
    // 3. shared experts added unweighted
    if (layer.shared.num_experts() > 0) {
        const int64_t n = num_tokens * config_.hidden_size;
        shared_out_.resize(static_cast<size_t>(n));
        layer.shared.forward_dense(pool_, h, num_tokens, moe_scratch_, dense_ids_, dense_weights_, shared_out_.data());
        tp_all_reduce(par_, shared_out_.data(), n);
        for (int64_t i = 0; i < n; ++i) out[i] += shared_out_[static_cast<size_t>(i)];
    }
}

TensorView DeepseekV3Model::forward(const ForwardBatch& batch, KvCache& kv_base) {
    auto& kv = dynamic_cast<MlaKvCache&>(kv_base);
    const DeepseekV3Config& c = config_;
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
        // 2. attention block: x += o_proj(mla(norm(x)))
        layer.attention.forward(pool_, hs, batch, kv.layer(static_cast<int64_t>(i)), *rope_, path_, attn_scratch_, out);
        tp_all_reduce(par_, out, t * h);  // row-parallel o_proj: partial sums over TP
        kc::add_rms_norm(pool_, x, out, layer.post_attention_layernorm.as<float>(), t, h, eps, hs);
        add_row_bias(layer.post_attention_layernorm_bias, hs, t, h);
        // 3. MoE / MLP block: x += mlp(norm(x)); fused with the next layer's input norm
        mlp_forward(layer, hs, t, batch.moe_exchange, out);
        const float* next_norm =
            i + 1 < layers_.size() ? layers_[i + 1].input_layernorm.as<float>() : norm_.as<float>();
        kc::add_rms_norm(pool_, x, out, next_norm, t, h, eps, hs);
        if (i + 1 < layers_.size()) add_row_bias(layers_[i + 1].input_layernorm_bias, hs, t, h);
    }
    // 4. final norm (done above) on the rows that need logits -> lm_head [R, vocab]
    return compute_logits(par_, pool_, lm_head_, c.vocab_size, hs, h, batch.logits_rows, logits_scratch_);
}

}  // namespace moeserve::model
