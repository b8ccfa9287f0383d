// The feed-forward half of a MoE decoder layer, shared by every architecture: router (always high
// precision), routed experts (EP
// dispatch/combine or TP-split), shared experts added (unweighted, or sigmoid-gated), or a dense MLP on the layers
// without experts. What an architecture owns is passed in: its sizes (MoeShape), its tensor names (MoeNames) and its
// routing rule (RoutingRule).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/kernels/buffer.h"
#include "moeserve/model/eplb/expert_placement.h"
#include "moeserve/model/layers/experts.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/layers/parallel_ops.h"
#include "moeserve/model/parallel_config.h"
#include "moeserve/model/quantization.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

struct MoeShape {
    int64_t hidden = 0;
    int64_t num_experts = 0;   // routed experts of the whole model
    int64_t top_k = 0;         // routed experts per token
    int64_t moe_inter = 0;     // one routed expert's intermediate size
    int64_t shared_inter = 0;  // the shared experts' intermediate size, fused as one expert; 0: none
    int64_t dense_inter = 0;   // a dense layer's MLP intermediate size
};

struct MoeShards;

// An architecture's own loader of routed experts, for checkpoints that stack them in one tensor
// (gpt-oss): the experts of global ids expert_ids under layer_prefix, in order, running as ids
// first_id, first_id + 1, ... (EP shards and EPLB slots), with the shards' intermediate slice.
using RoutedExpertsLoader = std::function<Experts(const io::WeightSource& weights, const std::string& layer_prefix,
                                                  const std::vector<int64_t>& expert_ids, int64_t first_id,
                                                  const MoeShards& shards, const Quantization& quant)>;

// Tensor names below the layer prefix ("model.layers.N."); the routed experts' projections are
// `projections` (layers/experts.h), the shared experts' and dense MLPs' gate_proj / up_proj / down_proj.
struct MoeNames {
    std::string router = "mlp.gate";       // .weight [num_experts, hidden]
    std::string router_bias{};             // f32 [num_experts] added to the scores when present; "": none
    std::string experts = "mlp.experts.";  // + expert id + "."
    ExpertProjections projections{};       // the routed experts' gate / up / down under their prefix
    std::string shared_experts{};          // prefix of the shared experts; "": none
    // [1, hidden] (+ ".weight"): the shared experts' output is scaled per token by sigmoid(gate . h)
    // (Qwen2-MoE's shared_expert_gate); "": added unweighted
    std::string shared_expert_gate{};
    std::string dense = "mlp.";  // prefix of a dense layer's MLP
    // Set: the routed experts come from this loader instead of `experts` + id + projections.
    RoutedExpertsLoader load_routed_experts{};
};

// The architecture's routing: router logits f32 [num_tokens, num_experts] (may be overwritten) and
// the layer's score bias f32 [num_experts] (nullptr: none) -> topk_ids [num_tokens, k] (global
// expert ids) and topk_weights [num_tokens, k]. Never called with num_tokens == 0.
using RoutingRule = std::function<void(float* logits, int64_t num_tokens, const float* score_bias, int32_t* topk_ids,
                                       float* topk_weights)>;

// What this rank holds of every MoE block (parallel_config.h). Error kInvalidArgument when the TP
// size does not divide the dense or shared intermediate size (and, from local_experts /
// local_moe_inter, when EP or TP does not divide the experts).
struct MoeShards {
    ShardRange experts, moe_inter, dense_inter, shared_inter;
    static MoeShards of(const ParallelConfig& par, const MoeShape& shape);
};

// EPLB's part in one layer's forward (eplb/expert_balancer.h).
struct ExpertBalance {
    // Which slots hold which experts; null: expert e is slot e (the plain EP shards).
    const ExpertPlacement* placement = nullptr;
    int32_t* counts = nullptr;  // [num_experts]: += the tokens this rank routes to each expert; null: not counted
    int ep_rank = 0;
};

// Buffers of MoeBlock::forward, one set per model (reused by every layer and step).
struct MoeBlockScratch {
    kernels::Buffer router_logits, topk_weights, shared_out, dense_weights;
    std::vector<int32_t> topk_ids, dense_ids;
    std::vector<int32_t> copy_turns;  // EPLB: ExpertPlacement::to_physical's scratch
    kernels::Buffer routed_slice;     // EP with TP: this TP rank's slice of the routed output
    std::vector<size_t> slice_bytes;  // EP with TP: bytes of each TP rank's slice (no allocation per layer)
    ParallelMoe parallel_moe{};
    // Cumulative bytes of routed expert weights this rank's rows made the forwards read: per MoE
    // layer and forward, the distinct experts its rows chose (each read once; under EP by
    // whichever rank holds it) times an expert's bytes.
    int64_t routed_expert_bytes = 0;
    std::vector<uint8_t> expert_seen;  // [num_experts] scratch of that count
};

class MoeBlock {
public:
    MoeBlock() = default;
    // Loads layer_prefix + names: the router (LayerPrecision::kHigh, whatever its name), its
    // optional bias, this rank's routed experts and the shared experts (is_moe), or the dense MLP.
    // With a placement (EPLB), this rank's routed experts are the experts of its slots.
    static MoeBlock load(const io::WeightSource& weights, const std::string& layer_prefix, bool is_moe,
                         const MoeShape& shape, const MoeNames& names, const MoeShards& shards,
                         const Quantization& quant, const ExpertPlacement* placement = nullptr, int ep_rank = 0);
    // The routed experts of EP rank ep_rank's slots under `placement` (slot order; they run as
    // physical ids ep_rank * slots_per_rank + slot), for load() and EPLB's moves.
    static Experts load_placed_experts(const io::WeightSource& weights, const std::string& layer_prefix,
                                       const MoeShape& shape, const MoeNames& names, const MoeShards& shards,
                                       const Quantization& quant, const ExpertPlacement& placement, int ep_rank);
    // Test hook (LoadOptions::debug_router_skew): added to the router logits [num_experts]
    // before routing, so that a few experts take most tokens.
    void set_router_skew(std::vector<float> skew) { router_skew_ = std::move(skew); }
    // EPLB: this rank's routed experts under a new placement (load_placed_experts).
    void replace_routed_experts(Experts experts) { experts_ = std::move(experts); }

    // Appends the tensors load() reads under layer_prefix, for the generator: the router (kHigh,
    // 4x sharper than 1/sqrt(hidden) so top-k has clear gaps), with with_router_bias its F32 bias
    // (small: reorders only near-ties), the routed experts (unless names.load_routed_experts: the
    // architecture lists its own) and the shared experts; or the dense MLP.
    static void weight_specs(std::vector<WeightSpec>& specs, const std::string& layer_prefix, bool is_moe,
                             const MoeShape& shape, const MoeNames& names, bool with_router_bias);

    // out f32 [num_tokens, hidden] = the block applied to h f32 [num_tokens, hidden], complete on
    // every TP rank. num_tokens may be 0 (the rank still joins the EP exchange). With EP and TP,
    // h must be the same on every rank of the TP group: each routes only its slice of the rows.
    void forward(ThreadPool& pool, const ParallelConfig& par, const RoutingRule& route, const float* h,
                 int64_t num_tokens, parallel::MoeExchangeKind exchange, MoeBlockScratch& scratch, float* out,
                 const ExpertBalance& balance = {}) const;

    bool is_moe() const { return is_moe_; }
    // Bytes this rank holds, and the bytes one token reads (router, shared and k experts; or the MLP).
    size_t weight_bytes() const;
    size_t active_bytes() const;

private:
    // MoeBlockScratch::routed_expert_bytes of one forward's choices ids [choices] (logical experts).
    void count_routed_bytes(const int32_t* ids, int64_t choices, MoeBlockScratch& s) const;
    bool is_moe_ = false;
    int k_ = 0;
    int64_t hidden_ = 0, experts_per_rank_ = 1;  // experts, or EPLB's slots, per EP rank
    Linear router_;                              // [num_experts, hidden]
    Tensor score_bias_;                          // f32 [num_experts], or empty
    Experts experts_;                            // routed experts, or the dense MLP as one expert
    Experts shared_;                             // shared experts as one expert, or empty
    Tensor shared_gate_;                         // f32 [hidden], or empty: the shared output unweighted
    std::vector<float> router_skew_;             // f32 [num_experts] added to the router logits, or empty (a test hook)
};

}  // namespace moeserve::model
