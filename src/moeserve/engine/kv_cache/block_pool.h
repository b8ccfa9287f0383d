// BlockPool: the KV cache's block ids, their reference counts, the free list in eviction order
// (least recently freed first) and the prefix cache's hash -> block map (vLLM's BlockPool).
// Block 0 is the null block: never allocated, it pads block tables. Engine thread only.
//
//   free list:  head -> [b7 b3 b9 ... b2] <- tail      allocate() pops at the head (evicting
//               (oldest free)        (newest free)     its cached hash); free() appends at the tail;
//                                                      touch() of a cached hit unlinks it anywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace moeserve::engine {

class BlockPool {
public:
    // num_blocks >= 2 (block 0 is the null block). All others start free, in id order.
    explicit BlockPool(int32_t num_blocks);

    int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
    // Blocks with ref count 0 (some may hold cached prefixes, evicted on reuse).
    int32_t num_free_blocks() const { return num_free_; }
    // Share of usable blocks (all but the null block) in use by requests.
    float usage() const;

    // Pops n blocks from the head of the free list, evicting their cached hashes; each gets ref
    // count 1. Precondition: n <= num_free_blocks().
    std::vector<int32_t> allocate(int32_t n);
    // Takes a reference on each block (prefix cache hits); a free one leaves the free list.
    void touch(std::span<const int32_t> block_ids);
    // Drops a reference on each block, in order; blocks reaching 0 join the free list's tail (so
    // callers pass a request's blocks tail-first: its last blocks are evicted first).
    void free(std::span<const int32_t> block_ids);

    // The block caching `hash`, if any.
    std::optional<int32_t> lookup(uint64_t hash) const;
    // Records that block_id (allocated, full) holds the prefix hashed as `hash`. A hash already
    // cached by another block keeps that block.
    void cache_block(int32_t block_id, uint64_t hash);
    // Forgets every cached hash (blocks stay allocated). Returns false if none were cached.
    bool reset_prefix_cache();

    int32_t ref_count(int32_t block_id) const { return ref_counts_[static_cast<size_t>(block_id)]; }
    std::optional<uint64_t> block_hash(int32_t block_id) const;
    // Block ids of the free list, head (next evicted) first. For tests and debugging.
    std::vector<int32_t> free_list() const;

private:
    void unlink(int32_t b);
    void push_tail(int32_t b);

    std::vector<int32_t> ref_counts_;
    std::vector<int32_t> prev_, next_;  // free list links; -1 = none
    std::vector<bool> in_free_list_;
    std::vector<std::optional<uint64_t>> hashes_;
    int32_t head_ = -1, tail_ = -1, num_free_ = 0;
    std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block
};

}  // namespace moeserve::engine
