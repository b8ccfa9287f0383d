#include "moeserve/model/layers/moe_block.h"

#include <algorithm>
#include <cmath>

#include "moeserve/core/error.h"
#include "moeserve/model/layers/weight_loading.h"

namespace moeserve::model {

MoeShards MoeShards::of(const ParallelConfig& par, const MoeShape& shape) {
    MoeShards s;
    s.experts = local_experts(par, shape.num_experts);
    s.moe_inter = local_moe_inter(par, shape.moe_inter);
    if (shape.dense_inter % par.tp_size != 0 || shape.shared_inter % par.tp_size != 0) {
        if (shape.shared_inter == 0) {
            raise(ErrorCode::kInvalidArgument, "intermediate_size ({}) must be divisible by tensor-parallel-size ({})",
                  shape.dense_inter, par.tp_size);
        }
        raise(ErrorCode::kInvalidArgument,
              "intermediate_size ({}) and the shared experts' size ({}) must be divisible by tensor-parallel-size "
              "({})",
              shape.dense_inter, shape.shared_inter, par.tp_size);
    }
    s.dense_inter = shard_range(shape.dense_inter, par.tp_size, par.tp_rank);
    s.shared_inter = shard_range(shape.shared_inter, par.tp_size, par.tp_rank);
    return s;
}

MoeBlock MoeBlock::load(const io::WeightSource& weights, const std::string& layer_prefix, bool is_moe,
                        const MoeShape& shape, const MoeNames& names, const MoeShards& shards,
                        const Quantization& quant, const ExpertPlacement* placement, int ep_rank) {
    const io::WeightSource& w = weights;
    const std::string& p = layer_prefix;
    MoeBlock b;
    b.is_moe_ = is_moe;
    b.k_ = static_cast<int>(shape.top_k);
    b.hidden_ = shape.hidden;
    b.experts_per_rank_ = std::max<int64_t>(shards.experts.count, 1);
    const int64_t h = shape.hidden;
    if (!is_moe) {
        b.experts_ = Experts::load(w, {p + names.dense}, h, shape.dense_inter, 0, shards.dense_inter.begin,
                                   shards.dense_inter.count, quant);
        return b;
    }
    // routing decisions are discontinuous and the router is tiny: never int8, whatever it is called
    b.router_ = Linear::load(w, p + names.router, shape.num_experts, h, false, quant, LayerPrecision::kHigh);
    if (!names.router_bias.empty() && w.contains(p + names.router_bias)) {
        b.score_bias_ = load_vector_f32(w, p + names.router_bias, shape.num_experts);
    }
    if (placement != nullptr) {
        b.experts_per_rank_ = placement->slots_per_rank();
        b.experts_ = load_placed_experts(w, p, shape, names, shards, quant, *placement, ep_rank);
    } else if (names.load_routed_experts) {
        std::vector<int64_t> ids(static_cast<size_t>(shards.experts.count));
        for (int64_t i = 0; i < shards.experts.count; ++i) ids[static_cast<size_t>(i)] = shards.experts.begin + i;
        b.experts_ = names.load_routed_experts(w, p, ids, shards.experts.begin, shards, quant);
    } else {
        std::vector<std::string> prefixes;
        for (int64_t e = shards.experts.begin; e < shards.experts.begin + shards.experts.count; ++e) {
            prefixes.push_back(p + names.experts + std::to_string(e) + ".");
        }
        b.experts_ = Experts::load(w, prefixes, h, shape.moe_inter, shards.experts.begin, shards.moe_inter.begin,
                                   shards.moe_inter.count, quant, names.projections);
    }
    if (!names.shared_experts.empty() && shape.shared_inter > 0) {
        b.shared_ = Experts::load(w, {p + names.shared_experts}, h, shape.shared_inter, 0, shards.shared_inter.begin,
                                  shards.shared_inter.count, quant);
        if (!names.shared_expert_gate.empty()) {  // one row: the same on every rank, read as f32
            Tensor gate = w.load_f32(p + names.shared_expert_gate + ".weight");
            if (gate.numel() != h) {
                raise(ErrorCode::kInvalidModel, "{} has {} values; the shared expert gate is [1, {}]",
                      w.describe(p + names.shared_expert_gate + ".weight"), gate.numel(), h);
            }
            b.shared_gate_ = std::move(gate);
        }
    }
    return b;
}

Experts MoeBlock::load_placed_experts(const io::WeightSource& weights, const std::string& layer_prefix,
                                      const MoeShape& shape, const MoeNames& names, const MoeShards& shards,
                                      const Quantization& quant, const ExpertPlacement& placement, int ep_rank) {
    const int64_t first = ep_rank * placement.slots_per_rank();
    if (names.load_routed_experts) {
        std::vector<int64_t> ids;
        for (int64_t slot = first; slot < first + placement.slots_per_rank(); ++slot) {
            ids.push_back(placement.expert_of_slot(slot));
        }
        return names.load_routed_experts(weights, layer_prefix, ids, first, shards, quant);
    }
    std::vector<std::string> prefixes;
    for (int64_t slot = first; slot < first + placement.slots_per_rank(); ++slot) {
        prefixes.push_back(layer_prefix + names.experts + std::to_string(placement.expert_of_slot(slot)) + ".");
    }
    return Experts::load(weights, prefixes, shape.hidden, shape.moe_inter, first, shards.moe_inter.begin,
                         shards.moe_inter.count, quant, names.projections);
}

namespace {
// One SwiGLU expert (or MLP) under prefix: scales 1/sqrt(fan_in) keep activations near unit size.
void add_expert_specs(std::vector<WeightSpec>& specs, const std::string& prefix, int64_t hidden, int64_t inter,
                      const ExpertProjections& names = {}) {
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(hidden));
    const float out_scale = 1.0f / std::sqrt(static_cast<float>(inter));
    specs.push_back({prefix + names.gate + ".weight", {inter, hidden}, DType::kBF16, WeightInit::kNormal, in_scale});
    specs.push_back({prefix + names.up + ".weight", {inter, hidden}, DType::kBF16, WeightInit::kNormal, in_scale});
    specs.push_back({prefix + names.down + ".weight", {hidden, inter}, DType::kBF16, WeightInit::kNormal, out_scale});
}
}  // namespace

void MoeBlock::weight_specs(std::vector<WeightSpec>& specs, const std::string& layer_prefix, bool is_moe,
                            const MoeShape& shape, const MoeNames& names, bool with_router_bias) {
    const std::string& p = layer_prefix;
    const int64_t h = shape.hidden;
    if (!is_moe) {
        add_expert_specs(specs, p + names.dense, h, shape.dense_inter);
        return;
    }
    specs.push_back({p + names.router + ".weight",
                     {shape.num_experts, h},
                     DType::kBF16,
                     WeightInit::kNormal,
                     4.0f / std::sqrt(static_cast<float>(h)),
                     LayerPrecision::kHigh});
    if (with_router_bias) {
        specs.push_back({p + names.router_bias, {shape.num_experts}, DType::kF32, WeightInit::kNormal, 0.05f});
    }
    for (int64_t e = 0; e < shape.num_experts && !names.load_routed_experts; ++e) {  // else the architecture's
        add_expert_specs(specs, p + names.experts + std::to_string(e) + ".", h, shape.moe_inter, names.projections);
    }
    if (!names.shared_experts.empty() && shape.shared_inter > 0) {
        add_expert_specs(specs, p + names.shared_experts, h, shape.shared_inter);
        if (!names.shared_expert_gate.empty()) {
            specs.push_back({p + names.shared_expert_gate + ".weight",
                             {1, h},
                             DType::kBF16,
                             WeightInit::kNormal,
                             1.0f / std::sqrt(static_cast<float>(h)),
                             LayerPrecision::kHigh});
        }
    }
}

size_t MoeBlock::weight_bytes() const {
    return router_.weight_bytes() + shared_.weight_bytes() + experts_.weight_bytes();
}

size_t MoeBlock::active_bytes() const {
    if (!is_moe_) return experts_.weight_bytes();
    return router_.weight_bytes() + shared_.weight_bytes() + experts_.bytes_per_expert() * static_cast<size_t>(k_);
}

void MoeBlock::count_routed_bytes(const int32_t* ids, int64_t choices, MoeBlockScratch& s) const {
    s.expert_seen.assign(static_cast<size_t>(router_.out_features()), 0);
    int64_t distinct = 0;
    for (int64_t i = 0; i < choices; ++i) {
        uint8_t& seen = s.expert_seen[static_cast<size_t>(ids[i])];
        distinct += seen == 0 ? 1 : 0;
        seen = 1;
    }
    s.routed_expert_bytes += distinct * static_cast<int64_t>(experts_.bytes_per_expert());
}

void MoeBlock::forward(ThreadPool& pool, const ParallelConfig& par, const RoutingRule& route, const float* h,
                       int64_t num_tokens, parallel::MoeExchangeKind exchange, MoeBlockScratch& scratch, float* out,
                       const ExpertBalance& balance) const {
    MoeBlockScratch& s = scratch;
    const int64_t n = num_tokens * hidden_;
    if (!is_moe_) {
        // dense MLP: column-parallel gate/up, row-parallel down -> partial sums over TP
        if (num_tokens > 0) experts_.forward_dense(pool, h, num_tokens, s.dense_ids, s.dense_weights, out);
        tp_all_reduce(par, out, n);
        return;
    }
    // EP with TP: the TP ranks of a DP group hold the same tokens, so each routes and dispatches
    // only its slice of them (its EP group holds every expert), and an all-gather over TP gives
    // every rank all rows; without the slice each token's expert work would run tp times.
    const bool split = par.ep_size > 1 && par.tp_size > 1;
    const ShardRange mine = split ? shard_range(num_tokens, par.tp_size, par.tp_rank) : ShardRange{0, num_tokens};
    const float* h_mine = h + mine.begin * hidden_;
    const int64_t e = router_.out_features();
    s.router_logits.resize(static_cast<size_t>(mine.count * e));
    s.topk_ids.resize(static_cast<size_t>(mine.count * k_));
    s.topk_weights.resize(static_cast<size_t>(mine.count * k_));
    // 1. router: [T, hidden] -> [T, E] -> the architecture's top-k ids and weights [T, k]
    if (mine.count > 0) {
        router_.forward(pool, h_mine, mine.count, s.router_logits.data());
        if (!router_skew_.empty()) {
            for (int64_t t = 0; t < mine.count; ++t) {
                for (int64_t j = 0; j < e; ++j)
                    s.router_logits[static_cast<size_t>(t * e + j)] += router_skew_[static_cast<size_t>(j)];
            }
        }
        route(s.router_logits.data(), mine.count, score_bias_.empty() ? nullptr : score_bias_.as<float>(),
              s.topk_ids.data(), s.topk_weights.data());
        const int64_t choices = mine.count * k_;
        count_routed_bytes(s.topk_ids.data(), choices, s);
        // EPLB: count the experts routing chose, then pick the copy (slot) that serves each choice
        if (balance.counts != nullptr) {
            for (int64_t i = 0; i < choices; ++i) ++balance.counts[s.topk_ids[static_cast<size_t>(i)]];
        }
        if (balance.placement != nullptr) {
            balance.placement->to_physical(s.topk_ids.data(), choices, balance.ep_rank, s.copy_turns);
        }
    }
    // 2. routed experts, weighted sum -> out [T, hidden] (EP dispatch/combine, or TP-split + all-reduce)
    float* routed = out;
    if (split) {
        s.routed_slice.resize(static_cast<size_t>(std::max<int64_t>(mine.count, 1) * hidden_));
        routed = s.routed_slice.data();
    }
    s.parallel_moe.forward(pool, experts_, par,
                           {h_mine, mine.count, s.topk_ids.data(), s.topk_weights.data(), k_, exchange},
                           experts_per_rank_, routed);
    if (split) {
        s.slice_bytes.resize(static_cast<size_t>(par.tp_size));
        for (int r = 0; r < par.tp_size; ++r)
            s.slice_bytes[static_cast<size_t>(r)] =
                static_cast<size_t>(shard_range(num_tokens, par.tp_size, r).count * hidden_) * sizeof(float);
        par.tp->all_gather_v_bytes(
            std::as_bytes(std::span<const float>(routed, static_cast<size_t>(mine.count * hidden_))), s.slice_bytes,
            std::as_writable_bytes(std::span<float>(out, static_cast<size_t>(n))));
    }
    // 3. shared experts added, unweighted or scaled per token by their sigmoid gate
    if (shared_.num_experts() > 0) {
        s.shared_out.resize(static_cast<size_t>(n));
        if (num_tokens > 0) {
            shared_.forward_dense(pool, h, num_tokens, s.dense_ids, s.dense_weights, s.shared_out.data());
        }
        tp_all_reduce(par, s.shared_out.data(), n);
        for (int64_t t = 0; t < num_tokens; ++t) {
            float scale = 1.0f;
            if (!shared_gate_.empty()) {
                const float* g = shared_gate_.as<float>();
                const float* x = h + t * hidden_;
                double dot = 0.0;
                for (int64_t j = 0; j < hidden_; ++j) dot += static_cast<double>(g[j]) * x[j];
                scale = static_cast<float>(1.0 / (1.0 + std::exp(-dot)));
            }
            float* o = out + t * hidden_;
            const float* sh = s.shared_out.data() + t * hidden_;
            for (int64_t j = 0; j < hidden_; ++j) o[j] += scale * sh[j];
        }
    }
}

}  // namespace moeserve::model
