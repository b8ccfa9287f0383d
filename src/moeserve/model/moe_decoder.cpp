#include "moeserve/model/moe_decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/norm.h"
#include "moeserve/model/formats/gguf_weights.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

namespace kc = kernels::cpu;

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
    const MoeShards& shards = shards_;
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
        const std::string p = "model.layers." + std::to_string(i) + ".";
        Layer layer{load_vector_f32(w, p + "input_layernorm.weight", h),
                    load_vector_f32(w, p + "post_attention_layernorm.weight", h),
                    {},
                    {},
                    {}};
        const auto attention_bytes = static_cast<int64_t>(load_attention(w, i, p + "self_attn."));
        const bool is_moe = spec_.is_moe_layer(i);
        moe_index_.push_back(is_moe ? static_cast<int64_t>(moe_layers_.size()) : -1);
        if (is_moe) moe_layers_.push_back(i);
        layer.mlp = MoeBlock::load(w, p, is_moe, spec_.moe, spec_.names, shards, options.quant,
                                   placement ? &*placement : nullptr, par_.ep_rank);
        if (is_moe && !options.debug_router_skew.empty()) {
            layer.mlp.set_router_skew(parse_router_skew(options.debug_router_skew, spec_.moe.num_experts));
        }
        active_bytes += attention_bytes + static_cast<int64_t>(layer.mlp.active_bytes());
        rank_bytes += attention_bytes + static_cast<int64_t>(layer.mlp.weight_bytes()) + 2 * h * 4;
        layer.input_layernorm_bias = load_optional_vector_f32(w, p + "input_layernorm.bias", h);
        layer.post_attention_layernorm_bias = load_optional_vector_f32(w, p + "post_attention_layernorm.bias", h);
        layers_.push_back(std::move(layer));
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
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        // gains near one but not exactly, so a missed norm shows
        specs.push_back({p + "input_layernorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        specs.push_back({p + "post_attention_layernorm.weight", {h}, DType::kBF16, WeightInit::kNormOnes, 0.1f});
        attention_specs(specs, i, p + "self_attn.");
        MoeBlock::weight_specs(specs, p, spec.is_moe_layer(i), spec.moe, spec.names, with_router_bias);
    }
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
    kc::rms_norm(pool_, x, layers_[0].input_layernorm.as<float>(), t, h, eps, hs);
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
        if (last && !keeps_all_rows(batch.logits_rows, t)) {
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
            kc::add_rms_norm(pool_, x, out, layer.post_attention_layernorm.as<float>(), rows, h, eps, hs);
            add_row_bias(layer.post_attention_layernorm_bias, hs, rows, h);
        }
        // 4. MoE / MLP block: x += mlp(norm(x)); fused with the next layer's input norm
        ExpertBalance balance;
        if (const int64_t m = moe_index_[i]; balancer_ && m >= 0) {
            balance = {&balancer_->placement(m), balancer_->counts(m), par_.ep_rank};
        }
        layer.mlp.forward(pool_, par_, spec_.route, hs, rows, batch.moe_exchange, moe_scratch_, out, balance);
        const float* next_norm = last ? norm_.as<float>() : layers_[i + 1].input_layernorm.as<float>();
        if (rows > 0) kc::add_rms_norm(pool_, x, out, next_norm, rows, h, eps, hs);
        if (!last) add_row_bias(layers_[i + 1].input_layernorm_bias, hs, rows, h);
    }
    // 5. final norm (done above) on the rows that need logits -> lm_head [R, vocab]
    if (rows == t)
        return compute_logits(par_, pool_, lm_head_, c.vocab_size, hs, h, batch.logits_rows, logits_scratch_);
    rows_.resize(static_cast<size_t>(r));
    std::iota(rows_.begin(), rows_.end(), 0);
    return compute_logits(par_, pool_, lm_head_, c.vocab_size, hs, h, rows_, logits_scratch_);
}

}  // namespace moeserve::model
