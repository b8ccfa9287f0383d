#include "moeserve/engine/kv_cache/block_pool.h"

#include "moeserve/core/error.h"

namespace moeserve::engine {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_counts_(static_cast<size_t>(num_blocks), 0),
      prev_(static_cast<size_t>(num_blocks), -1),
      next_(static_cast<size_t>(num_blocks), -1),
      in_free_list_(static_cast<size_t>(num_blocks), false),
      hashes_(static_cast<size_t>(num_blocks)) {
    MOESERVE_CHECK(num_blocks >= 2, "a block pool needs the null block and at least one more; got {}", num_blocks);
    ref_counts_[0] = 1;  // the null block is never free
    for (int32_t b = 1; b < num_blocks; ++b) push_tail(b);
}

float BlockPool::usage() const {
    const int32_t usable = num_blocks() - 1;
    return static_cast<float>(usable - num_free_) / static_cast<float>(usable);
}

void BlockPool::unlink(int32_t b) {
    const auto i = static_cast<size_t>(b);
    MOESERVE_CHECK(in_free_list_[i], "block {} is not free", b);
    if (prev_[i] >= 0)
        next_[static_cast<size_t>(prev_[i])] = next_[i];
    else
        head_ = next_[i];
    if (next_[i] >= 0)
        prev_[static_cast<size_t>(next_[i])] = prev_[i];
    else
        tail_ = prev_[i];
    prev_[i] = next_[i] = -1;
    in_free_list_[i] = false;
    --num_free_;
}

void BlockPool::push_tail(int32_t b) {
    const auto i = static_cast<size_t>(b);
    prev_[i] = tail_;
    next_[i] = -1;
    if (tail_ >= 0)
        next_[static_cast<size_t>(tail_)] = b;
    else
        head_ = b;
    tail_ = b;
    in_free_list_[i] = true;
    ++num_free_;
}

std::vector<int32_t> BlockPool::allocate(int32_t n) {
    MOESERVE_CHECK(n >= 0 && n <= num_free_, "allocate {} blocks with {} free", n, num_free_);
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(n));
    for (int32_t k = 0; k < n; ++k) {
        const int32_t b = head_;
        unlink(b);
        auto& h = hashes_[static_cast<size_t>(b)];
        if (h) {  // evict the cached prefix this block held
            cached_.erase(*h);
            h.reset();
        }
        ref_counts_[static_cast<size_t>(b)] = 1;
        out.push_back(b);
    }
    return out;
}

void BlockPool::touch(std::span<const int32_t> block_ids) {
    for (int32_t b : block_ids) {
        MOESERVE_CHECK(b > 0 && b < num_blocks(), "touch of block {}", b);
        if (ref_counts_[static_cast<size_t>(b)]++ == 0) unlink(b);
    }
}

void BlockPool::free(std::span<const int32_t> block_ids) {
    for (int32_t b : block_ids) {
        MOESERVE_CHECK(b > 0 && b < num_blocks() && ref_counts_[static_cast<size_t>(b)] > 0,
                       "free of block {} (ref count {})", b,
                       b > 0 && b < num_blocks() ? ref_counts_[static_cast<size_t>(b)] : -1);
        if (--ref_counts_[static_cast<size_t>(b)] == 0) push_tail(b);
    }
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash) const {
    const auto it = cached_.find(hash);
    if (it == cached_.end()) return std::nullopt;
    return it->second;
}

void BlockPool::cache_block(int32_t block_id, uint64_t hash) {
    auto& h = hashes_[static_cast<size_t>(block_id)];
    if (h) return;  // already caches its prefix
    if (cached_.emplace(hash, block_id).second) h = hash;
}

bool BlockPool::reset_prefix_cache() {
    if (cached_.empty()) return false;
    for (auto& [hash, block] : cached_) hashes_[static_cast<size_t>(block)].reset();
    cached_.clear();
    return true;
}

std::optional<uint64_t> BlockPool::block_hash(int32_t block_id) const { return hashes_[static_cast<size_t>(block_id)]; }

std::vector<int32_t> BlockPool::free_list() const {
    std::vector<int32_t> out;
    for (int32_t b = head_; b >= 0; b = next_[static_cast<size_t>(b)]) out.push_back(b);
    return out;
}

}  // namespace moeserve::engine
