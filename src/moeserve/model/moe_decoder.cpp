#include "moeserve/model/moe_decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>

#include "moeserve/core/error.h"
#include "moeserve/kernels/ops.h"
#include "moeserve/model/formats/gguf_weights.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace {
// Whether the logits rows are every row in order (a prefill asking for all logits): nothing to drop.
bool keeps_all_rows(const std::vector<int32_t>& rows, int64_t num_tokens) {
    if (static_cast<int64_t>(rows.size()) != num_tokens) return false;
    for (size_t j = 0; j < rows.size(); ++j) {
        if (rows[j] != static_cast<int32_t>(j)) return false;
    }
    return true;
}

// LoadOptions::debug_router_skew -> the bias of each expert [num_experts].
std::vector<float> parse_router_skew(const std::string& text, int64_t num_experts) {
    const auto bad = [&] {
        raise(ErrorCode::kInvalidArgument,
              "MOESERVE_DEBUG_ROUTER_SKEW '{}' is not <experts>:<bias> with experts like 0,5-7 in [0, {})", text,
              num_experts);
    };
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) bad();
    std::vector<float> skew(static_cast<size_t>(num_experts), 0.0f);
    float bias = 0;
    try {
        bias = std::stof(text.substr(colon + 1));
    } catch (const std::exception&) {
        bad();
    }
    std::stringstream list(text.substr(0, colon));
    for (std::string item; std::getline(list, item, ',');) {
        const size_t dash = item.find('-');
        int64_t first = 0, last = 0;
        try {
            first = std::stoll(item.substr(0, dash));
            last = dash == std::string::npos ? first : std::stoll(item.substr(dash + 1));
        } catch (const std::exception&) {
            bad();
        }
        if (first < 0 || last < first || last >= num_experts) bad();
        for (int64_t e = first; e <= last; ++e) skew[static_cast<size_t>(e)] = bias;
    }
    return skew;
}

// EPLB's starting placement (none without --enable-eplb). Errors name the flag: EPLB without
// expert parallelism, redundant slots that the EP ranks cannot share evenly.
std::optional<ExpertPlacement> initial_placement(const EplbConfig& eplb, const ParallelConfig& par,
                                                 int64_t num_experts) {
    if (!eplb.enabled) return std::nullopt;
    if (par.ep_size < 2) {
        raise(ErrorCode::kInvalidArgument,
              "--enable-eplb balances experts between expert-parallel ranks: it needs --enable-expert-parallel "
              "with more than one rank");
    }
    if (eplb.num_redundant_experts % par.ep_size != 0) {
        raise(ErrorCode::kInvalidArgument,
              "--eplb-config: num_redundant_experts ({}) must be a multiple of the expert-parallel size ({})",
              eplb.num_redundant_experts, par.ep_size);
    }
    return ExpertPlacement::initial(num_experts, par.ep_size, eplb.num_redundant_experts);
}
}  // namespace

MoeDecoder::MoeDecoder(DecoderSpec spec, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
                       const LoadOptions& options, const AttentionLoader& load_attention)
    : spec_(std::move(spec)),
      par_(options.parallel),
      kv_dtype_(options.kv_dtype),
      weights_(std::move(weights)),
      pool_(pool) {
    const DecoderConfig& c = spec_.config;
    const io::WeightSource& w = *weights_;
    const int64_t h = c.hidden_size;
    // Shards of this rank (parallel_config.h): vocabulary rows, routed experts, MLP slices.
    vocab_shard_ = shard_range(c.vocab_size, par_.tp_size, par_.tp_rank);
    shards_ = MoeShards::of(par_, spec_.moe);
    // EPLB: every MoE layer starts at the initial placement
    const std::optional<ExpertPlacement> placement = initial_placement(options.eplb, par_, spec_.moe.num_experts);
    int64_t rank_bytes = h * 4;  // the final norm
    int64_t active_bytes = 0;
    if (const auto g = gguf_matrix(w, "model.embed_tokens.weight", c.vocab_size, h)) {
        // GGUF blocks (any type but BF16 / F32): the looked-up rows are dequantized
        embed_gguf_ = gguf_rectangle(*g, vocab_shard_.begin, vocab_shard_.count, 0, h, "model.embed_tokens.weight");
        rank_bytes += static_cast<int64_t>(gguf_matrix_bytes(embed_gguf_));
        active_bytes += static_cast<int64_t>(embed_gguf_.row_stride);
    } else {
        embed_tokens_ = get_checked(w, "model.embed_tokens.weight", {c.vocab_size, h})
                            .rows(vocab_shard_.begin, vocab_shard_.begin + vocab_shard_.count);
        if (embed_tokens_.dtype != DType::kBF16 && !(w.is_gguf() && embed_tokens_.dtype == DType::kF32)) {
            raise(ErrorCode::kUnsupported, "model.embed_tokens.weight has dtype {}; only BF16 embeddings are supported",
                  dtype_name(embed_tokens_.dtype));
        }
        embed_tokens_ = widen_to_f32_if(embed_tokens_, options.quant.f32_weights, embed_owned_);
        rank_bytes += static_cast<int64_t>(embed_tokens_.nbytes());
        active_bytes += h * static_cast<int64_t>(dtype_size(embed_tokens_.dtype));  // one embedding row
    }
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const bool is_moe = spec_.is_moe_layer(i);
        moe_index_.push_back(is_moe ? static_cast<int64_t>(moe_layers_.size()) : -1);
        if (is_moe) moe_layers_.push_back(i);
        LayerBytes bytes;
        layers_.push_back(load_layer(i, options, placement ? &*placement : nullptr, load_attention, bytes));
        if (is_moe && !options.debug_router_skew.empty()) {
            layers_.back().mlp.set_router_skew(parse_router_skew(options.debug_router_skew, spec_.moe.num_experts));
        }
        rank_bytes += bytes.rank;
        active_bytes += bytes.active;
    }
    norm_ = load_vector_f32(w, "model.norm.weight", h);
    if (w.contains("model.norm.bias")) {
        raise(ErrorCode::kUnsupported, "model.norm.bias: a bias on the final norm is not supported");
    }
    lm_head_ = Linear::load_shard(w, c.tie_word_embeddings ? "model.embed_tokens" : "lm_head", c.vocab_size, h,
                                  {vocab_shard_.begin, vocab_shard_.count, 0, -1}, false, options.quant,
                                  LayerPrecision::kOutputHead);
    active_bytes += static_cast<int64_t>(lm_head_.weight_bytes());
    if (!c.tie_word_embeddings) rank_bytes += static_cast<int64_t>(lm_head_.weight_bytes());
    if (options.draft_head) {
        LayerBytes bytes;
        load_draft_head(options, load_attention, bytes);
        rank_bytes += bytes.rank;  // not in the roofline's bytes per token: a draft is not a decoded token
    }

    info_.vocab_size = c.vocab_size;
    info_.num_hidden_layers = c.num_hidden_layers;
    info_.max_position_embeddings = c.max_position_embeddings;
    if (c.bos_token_id) info_.bos_token_id = static_cast<int32_t>(*c.bos_token_id);
    for (int64_t id : c.eos_token_id) info_.eos_token_ids.push_back(static_cast<int32_t>(id));
    for (const auto& name : w.names()) {
        if (const auto g = w.gguf(name)) {
            info_.weight_bytes += static_cast<int64_t>(g->bytes.size());
            info_.num_parameters += g->shape.numel();
            continue;
        }
        const TensorView t = w.get(name);
        info_.weight_bytes += static_cast<int64_t>(t.nbytes());
        info_.num_parameters += t.numel();
    }
    info_.rank_weight_bytes = rank_bytes;
    if (!par_.is_single()) info_.weight_bytes = rank_bytes;  // what this rank holds
    info_.active_weight_bytes_per_token = active_bytes;
    info_.quantization = options.quant.describe();
    if (placement) start_balancer(options, *placement);
}

MoeDecoder::Layer MoeDecoder::load_layer(int64_t i, const LoadOptions& options, const ExpertPlacement* placement,
                                         const AttentionLoader& load_attention, LayerBytes& bytes) const {
    const io::WeightSource& w = *weights_;
    const int64_t h = spec_.config.hidden_size;
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer layer{load_vector_f32(w, p + "input_layernorm.weight", h),
                load_vector_f32(w, p + "post_attention_layernorm.weight", h),
                {},
                load_optional_vector_f32(w, p + "input_layernorm.bias", h),
                load_optional_vector_f32(w, p + "post_attention_layernorm.bias", h)};
    const auto attention_bytes = static_cast<int64_t>(load_attention(w, i, p + "self_attn."));
    layer.mlp = MoeBlock::load(w, p, spec_.is_moe_layer(i), spec_.moe, spec_.names, shards_, options.quant, placement,
                               par_.ep_rank);
    bytes.active = attention_bytes + static_cast<int64_t>(layer.mlp.active_bytes());
    bytes.rank = attention_bytes + static_cast<int64_t>(layer.mlp.weight_bytes()) + 2 * h * 4;
    return layer;
}

void MoeDecoder::load_draft_head(const LoadOptions& options, const AttentionLoader& load_attention, LayerBytes& bytes) {
    const io::WeightSource& w = *weights_;
    const DecoderConfig& c = spec_.config;
    const int64_t h = c.hidden_size;
    const std::string p = "model.layers." + std::to_string(c.num_hidden_layers) + ".";
    if (!w.contains(p + "eh_proj.weight")) {
        raise(ErrorCode::kInvalidModel,
              "the draft head (--speculative-config deepseek_mtp) is the checkpoint's MTP layer, and {}eh_proj.weight "
              "is not in it",
              p);
    }
    // EPLB does not place or count the MTP layer: its experts keep the plain EP shards.
    auto head = std::make_unique<DraftHead>();
    head->block = load_layer(c.num_hidden_layers, options, nullptr, load_attention, bytes);
    head->enorm = load_vector_f32(w, p + "enorm.weight", h);
    head->hnorm = load_vector_f32(w, p + "hnorm.weight", h);
    head->eh_proj = Linear::load(w, p + "eh_proj", h, 2 * h, false, options.quant);
    head->head_norm = load_vector_f32(w, p + "shared_head.norm.weight", h);
    head->head =
        Linear::load_shard(w, p + "shared_head.head", c.vocab_size, h, {vocab_shard_.begin, vocab_shard_.count, 0, -1},
                           false, options.quant, LayerPrecision::kOutputHead);
    bytes.rank += static_cast<int64_t>(head->eh_proj.weight_bytes() + head->head.weight_bytes()) + 3 * h * 4;
    draft_ = std::move(head);
}

void MoeDecoder::start_balancer(const LoadOptions& options, const ExpertPlacement& initial) {
    Quantization quant = options.quant;
    quant.counts = std::make_shared<LinearCounts>();  // moves are not part of the load log's counts
    auto load = [this, quant](int64_t moe_layer, const ExpertPlacement& placement) {
        const std::string p = "model.layers." + std::to_string(moe_layers_[static_cast<size_t>(moe_layer)]) + ".";
        return MoeBlock::load_placed_experts(*weights_, p, spec_.moe, spec_.names, shards_, quant, placement,
                                             par_.ep_rank);
    };
    auto install = [this](int64_t moe_layer, std::optional<Experts> experts) {
        if (experts) {
            layers_[static_cast<size_t>(moe_layers_[static_cast<size_t>(moe_layer)])].mlp.replace_routed_experts(
                std::move(*experts));
        }
    };
    balancer_ = std::make_unique<ExpertBalancer>(options.eplb, par_.ep_rank, static_cast<int64_t>(moe_layers_.size()),
                                                 initial, load, install, options.logger);
}

std::vector<WeightSpec> MoeDecoder::weight_specs(const DecoderSpec& spec, bool with_router_bias,
                                                 const AttentionSpecs& attention_specs) {
    const DecoderConfig& c = spec.config;
    const int64_t h = c.hidden_size;
    std::vector<WeightSpec> specs;
    specs.push_back({"model.embed_tokens.weight",
                     {c.vocab_size, h},
                     DType::kBF16,
                     WeightInit::kNormal,
                     1.0f,
                     c.tie_word_embeddings ? LayerPrecision::kOutputHead : LayerPrecision::kHigh});
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer_specs(specs, spec, i, with_router_bias, attention_specs);
    specs.push_back({"model.norm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
    if (!c.tie_word_embeddings) {
        specs.push_back({"lm_head.weight",
                         {c.vocab_size, h},
                         DType::kBF16,
                         WeightInit::kNormal,
                         1.0f / std::sqrt(static_cast<float>(h)),
                         LayerPrecision::kOutputHead});
    }
    return specs;
}

void MoeDecoder::layer_specs(std::vector<WeightSpec>& specs, const DecoderSpec& spec, int64_t layer,
                             bool with_router_bias, const AttentionSpecs& attention_specs) {
    const int64_t h = spec.config.hidden_size;
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    // gains near one but not exactly, so a missed norm shows
    specs.push_back({p + "input_layernorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
    specs.push_back({p + "post_attention_layernorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
    attention_specs(specs, layer, p + "self_attn.");
    MoeBlock::weight_specs(specs, p, spec.is_moe_layer(layer), spec.moe, spec.names, with_router_bias);
}

void MoeDecoder::draft_head_specs(std::vector<WeightSpec>& specs, const DecoderSpec& spec, bool with_router_bias,
                                  const AttentionSpecs& attention_specs) {
    const DecoderConfig& c = spec.config;
    const int64_t h = c.hidden_size;
    const std::string p = "model.layers." + std::to_string(c.num_hidden_layers) + ".";
    const float inv_sqrt_h = 1.0f / std::sqrt(static_cast<float>(h));
    specs.push_back({p + "enorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
    specs.push_back({p + "hnorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
    specs.push_back({p + "eh_proj.weight",
                     {h, 2 * h},
                     DType::kBF16,
                     WeightInit::kNormal,
                     1.0f / std::sqrt(2.0f * static_cast<float>(h))});
    layer_specs(specs, spec, c.num_hidden_layers, with_router_bias, attention_specs);
    specs.push_back({p + "shared_head.norm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
    specs.push_back({p + "shared_head.head.weight",
                     {c.vocab_size, h},
                     DType::kBF16,
                     WeightInit::kNormal,
                     inv_sqrt_h,
                     LayerPrecision::kOutputHead});
}

int64_t MoeDecoder::rope_length(const LoadOptions& options) const {
    return options.max_model_len > 0 ? options.max_model_len : spec_.config.max_position_embeddings;
}

TensorView MoeDecoder::forward(const ForwardBatch& batch, int64_t num_positions, const AttentionStep& attention) {
    const DecoderConfig& c = spec_.config;
    const int64_t t = batch.num_tokens();
    const int64_t h = c.hidden_size;
    const auto eps = static_cast<float>(c.rms_norm_eps);
    check_forward_batch(batch, c.vocab_size, num_positions);
    const auto r = static_cast<int64_t>(batch.logits_rows.size());
    x_.resize(static_cast<size_t>(t * h));
    h_.resize(static_cast<size_t>(std::max(t, r) * h));
    tmp_.resize(static_cast<size_t>(t * h));
    float* x = x_.data();      // residual stream [T, hidden]
    float* hs = h_.data();     // normed input of the current block [T, hidden]
    float* out = tmp_.data();  // block output [T, hidden]

    // 1. embedding: ids [T] -> x [T, hidden]
    embed_vocab_parallel(par_, embed_tokens_, vocab_shard_, h, batch.token_ids.data(), t, x,
                         embed_gguf_.data != nullptr ? &embed_gguf_ : nullptr);
    kernels::ops().rms_norm(pool_, x, layers_[0].input_layernorm.as<float>(), t, h, eps, hs);
    add_row_bias(layers_[0].input_layernorm_bias, hs, t, h);
    int64_t rows = t;  // rows still computed: all T, then the R logits rows after the last attention
    // The EP exchange counts rows once per forward, and again at the last layer: there any rank
    // may keep fewer rows, so every rank recounts (the same collectives on each; ParallelMoe).
    moe_scratch_.parallel_moe.begin_forward();
    if (par_.tp != nullptr) par_.tp->begin_step();  // the desync guard's steps (guarded_comm.h)
    if (par_.ep != nullptr) par_.ep->begin_step();
    if (balancer_) balancer_->begin_forward(*par_.ep, !batch.dummy);  // may switch moved layers (all ranks at once)
    for (size_t i = 0; i < layers_.size(); ++i) {
        const Layer& layer = layers_[i];
        const bool last = i + 1 == layers_.size();
        if (last && i > 0) moe_scratch_.parallel_moe.begin_forward();
        // 2. attention block: x += o_proj(attn(norm(x))); writes every row's K/V
        attention(i, hs, out);
        tp_all_reduce(par_, out, t * h);  // row-parallel o_proj: partial sums over TP
        // 3. last layer: what follows feeds only the logits, so keep the rows that need them
        //    (llama.cpp's inp_out_ids); every TP rank has the same rows, every EP peer still joins
        //    (with a draft head, every row: it reads each row's final hidden state)
        if (last && draft_ == nullptr && !keeps_all_rows(batch.logits_rows, t)) {
            rows = r;
            rows_x_.resize(static_cast<size_t>(r * h));
            rows_out_.resize(static_cast<size_t>(r * h));
            for (int64_t j = 0; j < r; ++j) {
                const int64_t row = batch.logits_rows[static_cast<size_t>(j)];
                std::copy_n(x + row * h, h, rows_x_.data() + j * h);
                std::copy_n(out + row * h, h, rows_out_.data() + j * h);
            }
            x = rows_x_.data();
            out = rows_out_.data();
        }
        if (rows > 0) {
            kernels::ops().add_rms_norm(pool_, x, out, layer.post_attention_layernorm.as<float>(), rows, h, eps, hs);
            add_row_bias(layer.post_attention_layernorm_bias, hs, rows, h);
        }
        // 4. MoE / MLP block: x += mlp(norm(x)); fused with the next layer's input norm
        ExpertBalance balance;
        if (const int64_t m = moe_index_[i]; balancer_ && m >= 0) {
            balance = {&balancer_->placement(m), balancer_->counts(m), par_.ep_rank};
        }
        layer.mlp.forward(pool_, par_, spec_.route, hs, rows, batch.moe_exchange, moe_scratch_, out, balance);
        const float* next_norm = last ? norm_.as<float>() : layers_[i + 1].input_layernorm.as<float>();
        if (rows > 0) kernels::ops().add_rms_norm(pool_, x, out, next_norm, rows, h, eps, hs);
        if (!last) add_row_bias(layers_[i + 1].input_layernorm_bias, hs, rows, h);
    }
    if (draft_ != nullptr) {  // the draft head's input (forward_draft)
        hidden_.assign(hs, hs + t * h);
        hidden_count_ = t;
    }
    // 5. final norm (done above) on the rows that need logits -> lm_head [R, vocab]
    if (rows == t)
        return compute_logits(par_, pool_, lm_head_, c.vocab_size, hs, h, batch.logits_rows, logits_scratch_);
    rows_.resize(static_cast<size_t>(r));
    std::iota(rows_.begin(), rows_.end(), 0);
    return compute_logits(par_, pool_, lm_head_, c.vocab_size, hs, h, rows_, logits_scratch_);
}

TensorView MoeDecoder::forward_draft(const ForwardBatch& batch, int64_t num_positions, const AttentionStep& attention) {
    MOESERVE_CHECK(draft_ != nullptr, "forward_draft without a draft head");
    const DecoderConfig& c = spec_.config;
    const int64_t t = batch.num_tokens();
    const int64_t h = c.hidden_size;
    const auto eps = static_cast<float>(c.rms_norm_eps);
    check_forward_batch(batch, c.vocab_size, num_positions);
    MOESERVE_CHECK(batch.hidden_rows.size() == static_cast<size_t>(t), "draft batch: {} hidden rows for {} tokens",
                   batch.hidden_rows.size(), t);
    x_.resize(static_cast<size_t>(t * h));
    h_.resize(static_cast<size_t>(t * h));
    tmp_.resize(static_cast<size_t>(t * h));
    draft_in_.resize(static_cast<size_t>(t * 2 * h));
    float* x = x_.data();
    float* hs = h_.data();
    float* out = tmp_.data();
    if (par_.tp != nullptr) par_.tp->begin_step();  // a forward of its own for the desync guard
    if (par_.ep != nullptr) par_.ep->begin_step();
    moe_scratch_.parallel_moe.begin_forward();
    // 1. [enorm(embed(token)) | hnorm(hidden row)] -> eh_proj: the layer's residual stream
    embed_vocab_parallel(par_, embed_tokens_, vocab_shard_, h, batch.token_ids.data(), t, out,
                         embed_gguf_.data != nullptr ? &embed_gguf_ : nullptr);
    kernels::ops().rms_norm(pool_, out, draft_->enorm.as<float>(), t, h, eps, x);
    for (int64_t j = 0; j < t; ++j) {
        const int32_t row = batch.hidden_rows[static_cast<size_t>(j)];
        MOESERVE_CHECK(row >= 0 && row < hidden_count_, "draft batch: hidden row {} outside [0, {})", row,
                       hidden_count_);
        std::copy_n(hidden_.data() + row * h, h, out + j * h);
    }
    kernels::ops().rms_norm(pool_, out, draft_->hnorm.as<float>(), t, h, eps, hs);
    for (int64_t j = 0; j < t; ++j) {
        std::copy_n(x + j * h, h, draft_in_.data() + j * 2 * h);
        std::copy_n(hs + j * h, h, draft_in_.data() + j * 2 * h + h);
    }
    draft_->eh_proj.forward(pool_, draft_in_.data(), t, x);
    // 2. the decoder layer, as in forward()
    const Layer& layer = draft_->block;
    kernels::ops().rms_norm(pool_, x, layer.input_layernorm.as<float>(), t, h, eps, hs);
    add_row_bias(layer.input_layernorm_bias, hs, t, h);
    attention(layers_.size(), hs, out);
    tp_all_reduce(par_, out, t * h);
    kernels::ops().add_rms_norm(pool_, x, out, layer.post_attention_layernorm.as<float>(), t, h, eps, hs);
    add_row_bias(layer.post_attention_layernorm_bias, hs, t, h);
    layer.mlp.forward(pool_, par_, spec_.route, hs, t, batch.moe_exchange, moe_scratch_, out, {});
    // 3. shared_head.norm -> shared_head.head on the rows that draft
    kernels::ops().add_rms_norm(pool_, x, out, draft_->head_norm.as<float>(), t, h, eps, hs);
    return compute_logits(par_, pool_, draft_->head, c.vocab_size, hs, h, batch.logits_rows, logits_scratch_);
}

}  // namespace moeserve::model
