// Model: the interface every architecture implements (built by registry.h from config.json).
// forward() runs one ForwardBatch through the network, reading and writing a KvCache the model
// created, and returns the logits of the batch's logits_rows. Not thread-safe: one caller (the
// rank's compute thread); the model's kernels use the rank's ThreadPool.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/core/error.h"
#include "moeserve/core/tensor.h"
#include "moeserve/model/eplb/expert_load_stats.h"
#include "moeserve/model/forward_batch.h"
#include "moeserve/model/kv_cache.h"

namespace moeserve::model {

struct ModelInfo {
    std::string model_type;
    int64_t vocab_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t max_position_embeddings = 0;
    std::optional<int32_t> bos_token_id;
    std::vector<int32_t> eos_token_ids;
    int64_t kv_bytes_per_token = 0;  // KV cache bytes one token occupies over all layers
    int64_t weight_bytes = 0;        // bytes of weights the model holds (a TP/EP rank: its shard)
    int64_t rank_weight_bytes = 0;   // bytes of the weights this rank loaded (its TP/EP shard)
    int64_t num_parameters = 0;
    int64_t active_weight_bytes_per_token = 0;  // bytes one decoded token reads (decode roofline)
    // The checkpoint format and what was loaded, for the load log (Quantization::describe()).
    std::string quantization;
};

class Model {
public:
    virtual ~Model() = default;
    virtual const ModelInfo& info() const = 0;
    // KV storage for num_blocks blocks of block_size tokens (block 0 is the engine's null block).
    virtual std::unique_ptr<KvCache> create_kv_cache(int64_t num_blocks, int64_t block_size) const = 0;
    // Runs the batch. Returns logits f32 [batch.logits_rows.size(), vocab_size], valid until the
    // next call. The batch's new tokens' K/V are written to `kv` at batch.slot_mapping.
    virtual TensorView forward(const ForwardBatch& batch, KvCache& kv) = 0;
    // Speculative decoding's draft head (DeepSeek's MTP layer, loaded with LoadOptions::draft_head):
    // runs `batch` (ForwardBatch::hidden_rows set) through it after a forward() and returns the
    // draft logits f32 [batch.logits_rows.size(), vocab_size] (MoeDecoder::forward_draft). Its
    // K/V go to the cache's draft layer. Invalidates the logits forward() returned.
    virtual bool has_draft_head() const { return false; }
    virtual TensorView forward_draft(const ForwardBatch& /*batch*/, KvCache& /*kv*/) {
        raise(ErrorCode::kUnsupported, "{} has no draft head", info().model_type);
    }
    // Cumulative bytes of routed expert weights this rank's rows made its forwards read (MoeBlockScratch), for
    // benchmarks: what a decoded or an accepted drafted token costs in memory traffic.
    virtual int64_t routed_expert_bytes() const { return 0; }
    // EPLB's figures (--enable-eplb), or null.
    virtual const ExpertLoadStats* expert_load() const { return nullptr; }
    // The parallel group re-formed around a restarted rank (self-healing): state that the ranks
    // must share starts over (EPLB's placement).
    virtual void group_reformed() {}
};

}  // namespace moeserve::model
