// SequenceRunner: runs one sequence through a Model with its own KV cache (blocks 1..N in order),
// by prefill chunks and decode steps, with no scheduler between the caller and the model. The
// tests use it as the unbatched reference (model numerics against tests/reference, the engine's
// batched-equals-alone checks); every command runs the engine (EngineCore) instead.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "moeserve/model/model.h"

namespace moeserve::testing {

class SequenceRunner {
public:
    // Room for max_len tokens in blocks of block_size. The model must outlive the runner.
    SequenceRunner(model::Model& model, int64_t max_len, int64_t block_size);

    // Appends tokens in chunks of at most chunk_size (0 = all at once). Returns the logits of
    // every appended token, f32 [tokens.size(), vocab] (all_logits) or of the last one [1, vocab].
    std::vector<float> append(std::span<const int32_t> tokens, int64_t chunk_size = 0, bool all_logits = false);

    int64_t length() const { return length_; }
    // The MoE exchange the batches ask for (expert parallelism; all ranks must use the same).
    void set_moe_exchange(parallel::MoeExchangeKind kind) { moe_exchange_ = kind; }
    void reset() { length_ = 0; }

private:
    model::Model& model_;
    int64_t max_len_, block_size_;
    std::unique_ptr<model::KvCache> kv_;
    std::vector<int32_t> block_table_;
    int64_t length_ = 0;
    parallel::MoeExchangeKind moe_exchange_ = parallel::MoeExchangeKind::kAllToAll;
};

}  // namespace moeserve::testing
