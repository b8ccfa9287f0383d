#include "moeserve/testing/sequence_runner.h"

#include <algorithm>
#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::testing {

SequenceRunner::SequenceRunner(model::Model& model, int64_t max_len, int64_t block_size)
    : model_(model), max_len_(max_len), block_size_(block_size) {
    MOESERVE_CHECK(max_len > 0 && block_size > 0, "max_len {} block_size {}", max_len, block_size);
    const int64_t num_blocks = (max_len + block_size - 1) / block_size;
    kv_ = model.create_kv_cache(num_blocks + 1, block_size);  // + the null block 0
    for (int64_t b = 0; b < num_blocks; ++b) block_table_.push_back(static_cast<int32_t>(b + 1));
}

std::vector<float> SequenceRunner::append(std::span<const int32_t> tokens, int64_t chunk_size, bool all_logits) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (length_ + n > max_len_) {
        raise(ErrorCode::kInvalidArgument, "sequence of {} tokens exceeds the maximum length {}", length_ + n,
              max_len_);
    }
    std::vector<float> logits;
    if (chunk_size <= 0) chunk_size = std::max<int64_t>(n, 1);
    for (int64_t begin = 0; begin < n; begin += chunk_size) {
        const int64_t end = std::min(n, begin + chunk_size);
        const auto count = static_cast<int32_t>(end - begin);
        model::ForwardBatch batch;
        for (int64_t i = begin; i < end; ++i) {
            const int64_t pos = length_ + (i - begin);
            batch.token_ids.push_back(tokens[static_cast<size_t>(i)]);
            batch.positions.push_back(static_cast<int32_t>(pos));
            batch.slot_mapping.push_back(block_table_[static_cast<size_t>(pos / block_size_)] * block_size_ +
                                         pos % block_size_);
        }
        batch.query_start = {0, count};
        batch.seq_lens = {static_cast<int32_t>(length_ + count)};
        batch.block_tables = block_table_;
        batch.max_blocks_per_seq = static_cast<int64_t>(block_table_.size());
        batch.moe_exchange = moe_exchange_;
        if (all_logits) {
            for (int32_t r = 0; r < count; ++r) batch.logits_rows.push_back(r);
        } else if (end == n) {
            batch.logits_rows.push_back(count - 1);
        }
        const TensorView out = model_.forward(batch, *kv_);
        const size_t old = logits.size();
        logits.resize(old + static_cast<size_t>(out.numel()));
        std::memcpy(logits.data() + old, out.data, out.nbytes());
        length_ += count;
    }
    return logits;
}

}  // namespace moeserve::testing
