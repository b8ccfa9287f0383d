// The decoder every MoE architecture here shares: vocabulary-parallel embedding, N x [RMSNorm,
// attention, RMSNorm, MoeBlock], final RMSNorm, vocabulary-parallel lm_head, and the ModelInfo
// bookkeeping. An architecture (qwen3_moe/, deepseek_v3/) holds one MoeDecoder and brings only
// what is its own: the attention kind and its KV cache, the routing rule, the tensor names.
//
//   x = embed(ids)                                    [T, hidden]
//   for each layer i:  hs = norm_i(x); out = attention_i(hs)     (K/V written for all T rows)
//                      last layer only: keep the rows of batch.logits_rows (llama.cpp's inp_out_ids)
//                      x += out; hs = post_norm_i(x); x += moe_i(hs)
//   logits = lm_head(final_norm(x))                   [R, vocab]
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/io/weight_source.h"
#include "moeserve/model/eplb/expert_balancer.h"
#include "moeserve/model/forward_batch.h"
#include "moeserve/kernels/buffer.h"
#include "moeserve/kernels/weight_types.h"
#include "moeserve/model/layers/linear.h"
#include "moeserve/model/layers/moe_block.h"
#include "moeserve/model/layers/parallel_ops.h"
#include "moeserve/model/load_options.h"
#include "moeserve/model/model.h"
#include "moeserve/model/weight_spec.h"

namespace moeserve::model {

// What the decoder reads of an architecture's config (the same HF field names in each).
struct DecoderConfig {
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    bool tie_word_embeddings = false;
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_id;

    template <class Config>
    static DecoderConfig of(const Config& c) {
        return {c.vocab_size,   c.hidden_size,         c.num_hidden_layers, c.max_position_embeddings,
                c.rms_norm_eps, c.tie_word_embeddings, c.bos_token_id,      c.eos_token_id};
    }
};

// An architecture's part of the decoder, fixed at load.
struct DecoderSpec {
    DecoderConfig config{};
    MoeShape moe{};
    MoeNames names{};
    std::function<bool(int64_t layer)> is_moe_layer{};
    RoutingRule route{};
};

class MoeDecoder {
public:
    // Loads layer `layer`'s attention from `weights` under `prefix` ("model.layers.N.self_attn.")
    // into the architecture's own storage and returns its weight bytes. Called in layer order.
    using AttentionLoader =
        std::function<size_t(const io::WeightSource& weights, int64_t layer, const std::string& prefix)>;
    // Loads everything but the attention (load_attention does that, layer by layer) and fills
    // info() but for model_type and kv_bytes_per_token, which the architecture sets. Keeps
    // `weights` alive (bf16 tensors are views into its mapping); the pool must outlive it. Errors
    // (kInvalidModel, kUnsupported, kInvalidArgument) name the tensor or the size.
    MoeDecoder(DecoderSpec spec, std::shared_ptr<const io::WeightSource> weights, ThreadPool& pool,
               const LoadOptions& options, const AttentionLoader& load_attention);

    // The tensors the decoder loads, for the generator (testing/generator.cpp), in checkpoint order:
    // the embedding, per layer the two norms, attention_specs(specs, layer, "model.layers.N.self_attn.")
    // and the MoE block (MoeBlock::weight_specs), the final norm and, unless tied, lm_head.
    using AttentionSpecs =
        std::function<void(std::vector<WeightSpec>& specs, int64_t layer, const std::string& prefix)>;
    static std::vector<WeightSpec> weight_specs(const DecoderSpec& spec, bool with_router_bias,
                                                const AttentionSpecs& attention_specs);
    // The draft head's tensors (forward_draft): model.layers.{N}'s enorm, hnorm, eh_proj, decoder
    // layer and shared_head (the embedding is the decoder's: DeepSeek's copy of it is not written).
    static void draft_head_specs(std::vector<WeightSpec>& specs, const DecoderSpec& spec, bool with_router_bias,
                                 const AttentionSpecs& attention_specs);

    // RoPE table length: --max-model-len when given, else max_position_embeddings.
    int64_t rope_length(const LoadOptions& options) const;

    // Runs layer `layer`'s attention on the normed rows hs f32 [T, hidden] of the batch, writing
    // the batch's K/V, into out f32 [T, hidden] (this rank's partial sums under TP).
    using AttentionStep = std::function<void(size_t layer, const float* hs, float* out)>;
    // The forward of Model::forward: logits f32 [batch.logits_rows.size(), vocab], valid until the
    // next call. num_positions: the RoPE table's length (positions are checked against it).
    TensorView forward(const ForwardBatch& batch, int64_t num_positions, const AttentionStep& attention);

    // The draft head (LoadOptions::draft_head): DeepSeek's multi-token-prediction layer at index
    // num_hidden_layers. Row i of `batch` is the token after the position of row
    // batch.hidden_rows[i] of the last forward(), at that position:
    //   x = eh_proj([enorm(embed(token)) | hnorm(h)])   h: that row's final normed hidden state
    //   x = decoder layer num_hidden_layers (its attention on its own KV layer, its MoE)
    //   logits = shared_head.head(shared_head.norm(x))  of batch.logits_rows: drafts of the token
    //                                                   two past each row's position
    // (the float64 reference: tests/reference/deepseek_v3_ref.py mtp_logits). `attention` is
    // called with the layer index num_hidden_layers. Every TP/EP rank calls it after each forward.
    TensorView forward_draft(const ForwardBatch& batch, int64_t num_positions, const AttentionStep& attention);
    bool has_draft_head() const { return draft_ != nullptr; }

    int64_t routed_expert_bytes() const { return moe_scratch_.routed_expert_bytes; }
    // EPLB's figures (null without --enable-eplb).
    const ExpertLoadStats* expert_load() const { return balancer_ ? &balancer_->stats() : nullptr; }
    // The parallel group re-formed around a restarted rank, which starts from the initial
    // placement: every rank goes back to it (ExpertBalancer::reset).
    void group_reformed() {
        if (balancer_) balancer_->reset();
    }

    ModelInfo& info() { return info_; }
    const ModelInfo& info() const { return info_; }
    ThreadPool& pool() const { return pool_; }
    DType kv_dtype() const { return kv_dtype_; }  // the KV cache element type (LoadOptions::kv_dtype)

private:
    struct Layer {
        Tensor input_layernorm;                                      // f32 [hidden]
        Tensor post_attention_layernorm;                             // f32 [hidden]
        MoeBlock mlp;                                                // routed (+ shared) experts, or the dense MLP
        Tensor input_layernorm_bias, post_attention_layernorm_bias;  // f32 [hidden] or empty (ModelSlim)
    };
    // What the MTP layer has besides its decoder layer (forward_draft).
    struct DraftHead {
        Layer block;          // model.layers.{N}: norms, MoE (its attention: the architecture's)
        Tensor enorm, hnorm;  // f32 [hidden]
        Linear eh_proj;       // [hidden, 2 x hidden], whole on every TP rank
        Tensor head_norm;     // shared_head.norm f32 [hidden]
        Linear head;          // shared_head.head [vocab_shard.count, hidden], vocabulary-parallel
    };
    // Weight bytes a layer adds: on this rank, and read by one decoded token (the roofline).
    struct LayerBytes {
        int64_t rank = 0, active = 0;
    };
    // Loads decoder layer i (norms, the architecture's attention, the MoE block or MLP).
    Layer load_layer(int64_t i, const LoadOptions& options, const ExpertPlacement* placement,
                     const AttentionLoader& load_attention, LayerBytes& bytes) const;
    void load_draft_head(const LoadOptions& options, const AttentionLoader& load_attention, LayerBytes& bytes);
    // Decoder layer `layer`'s tensors (weight_specs, draft_head_specs).
    static void layer_specs(std::vector<WeightSpec>& specs, const DecoderSpec& spec, int64_t layer,
                            bool with_router_bias, const AttentionSpecs& attention_specs);

    const DecoderSpec spec_;
    const ParallelConfig par_;  // this rank's TP/EP shard
    const DType kv_dtype_;
    MoeShards shards_;        // what this rank holds of every MoE block
    ShardRange vocab_shard_;  // embedding / lm_head rows held here
    std::shared_ptr<const io::WeightSource> weights_;
    ThreadPool& pool_;
    ModelInfo info_;
    TensorView embed_tokens_;  // bf16 | f32 (--dtype float32) [vocab_shard.count, hidden]
    Tensor embed_owned_;       // the f32 widening behind embed_tokens_, when there is one
    // GGUF: the table's rows [vocab_shard) as stored blocks (data null: embed_tokens_ is used)
    kernels::GgufMatrix embed_gguf_;
    std::vector<Layer> layers_;
    Tensor norm_;     // f32 [hidden]
    Linear lm_head_;  // [vocab_shard.count, hidden] (embed_tokens when tied)

    std::unique_ptr<DraftHead> draft_;  // null unless LoadOptions::draft_head

    // Scratch, reused across steps.
    kernels::Buffer x_, h_, tmp_;  // [T, hidden]: residual stream, normed block input, block output
    // With a draft head: the last forward's final normed hidden states [T, hidden], and the draft
    // head's input rows [T, 2 x hidden].
    kernels::Buffer hidden_, draft_in_;
    int64_t hidden_count_ = 0;
    kernels::Buffer rows_x_, rows_out_;  // [R, hidden]: the last layer's logits rows of x_ and tmp_
    std::vector<int32_t> rows_;          // [R]: 0 .. R-1, the compacted rows' indices
    MoeBlockScratch moe_scratch_;
    LogitsScratch logits_scratch_;

    // EPLB (--enable-eplb): moe_index_[layer] is the layer's index among the MoE layers (-1: dense)
    std::vector<int64_t> moe_index_, moe_layers_;
    std::unique_ptr<ExpertBalancer> balancer_;
    void start_balancer(const LoadOptions& options, const ExpertPlacement& initial);
};

}  // namespace moeserve::model
