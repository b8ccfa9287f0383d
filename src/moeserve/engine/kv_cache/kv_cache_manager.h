// KvCacheManager: per-request block tables over a BlockPool, with automatic prefix caching of
// full blocks (vLLM v1's KVCacheManager). Owned by EngineCore and used by the Scheduler (and by
// EngineCore for its stats and to forget the prefix cache after a failed step), on the engine
// thread only.
//
//   request tokens  [p p p p|p p p p|p p o o|o . . .]   block_size 4, num_computed 10
//   block_ids       [  12   |   5   |   9   |  31   ]   blocks 12, 5 full -> hashed and cached
//   allocate_slots(req, 3) needs ceil(13/4) = 4 blocks; it has 4, so no new block.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "moeserve/engine/kv_cache/block_pool.h"
#include "moeserve/engine/request.h"

namespace moeserve::engine {

// Full blocks of a request's leading tokens already in the cache.
struct CachedPrefix {
    std::vector<int32_t> block_ids;
    int32_t num_tokens = 0;  // block_ids.size() * block_size
};

struct NewBlocks {
    std::vector<int32_t> block_ids;  // appended to the request's block table, in order
};

// Blocks for `bytes` of KV storage: bytes / (kv_bytes_per_token * block_size), at least 0.
int64_t num_blocks_for_bytes(int64_t bytes, int64_t kv_bytes_per_token, int64_t block_size);

class KvCacheManager {
public:
    // num_blocks includes the null block 0.
    KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

    // The longest run of the request's leading full blocks found in the cache, capped so at
    // least one token is left to compute (its logits are needed). Empty when caching is off,
    // when the request already has blocks, or when it asks for prompt logprobs (those need the
    // logits of every prompt token). Changes nothing but the request's cached block hashes.
    CachedPrefix find_cached_prefix(Request& request);

    // Blocks the pool must hand out for allocate_slots(request, num_new_tokens, prefix).
    int32_t num_blocks_needed(const Request& request, int32_t num_new_tokens, const CachedPrefix& prefix) const;
    bool can_allocate(const Request& request, int32_t num_new_tokens, const CachedPrefix& prefix) const {
        return num_blocks_needed(request, num_new_tokens, prefix) <= pool_.num_free_blocks();
    }

    // Makes room for num_new_tokens more tokens after the request's computed ones (and after
    // `prefix`, which must come from find_cached_prefix on a request without blocks): takes
    // the prefix blocks, advances num_computed_tokens past them, and allocates the rest. Full
    // blocks that these tokens complete are entered in the prefix cache. Returns nullopt, with
    // nothing changed, when the pool has too few free blocks (the caller preempts someone).
    // enter_in_cache = false leaves the new full blocks out of the prefix cache (their KV arrives
    // later from another instance; cache_blocks() enters them once it has).
    std::optional<NewBlocks> allocate_slots(Request& request, int32_t num_new_tokens, const CachedPrefix& prefix = {},
                                            bool enter_in_cache = true);
    // Enters the request's full blocks among its first num_tokens tokens in the prefix cache.
    void cache_blocks(Request& request, int32_t num_tokens) {
        if (enable_prefix_caching_) cache_full_blocks(request, num_tokens);
    }

    // Returns the request's blocks past those its first num_tokens tokens need to the pool (tail
    // first): the slots of a speculative step's rejected drafts. They are never in the prefix
    // cache (only full blocks of accepted tokens are).
    void free_tail(Request& request, int32_t num_tokens);
    // Returns all the request's blocks to the pool (tail first) and clears its block table.
    void free(Request& request);
    // Forgets every cached prefix (their blocks' KV is no longer trusted: a rank holding part of
    // it was replaced).
    void reset_prefix_cache() { pool_.reset_prefix_cache(); }

    int32_t block_size() const { return block_size_; }
    bool prefix_caching() const { return enable_prefix_caching_; }
    const BlockPool& pool() const { return pool_; }
    // Tokens looked up / found in the prefix cache at admissions (cumulative).
    int64_t prefix_cache_queries() const { return num_queried_tokens_; }
    int64_t prefix_cache_hits() const { return num_hit_tokens_; }

private:
    int32_t blocks_for_tokens(int32_t n) const { return (n + block_size_ - 1) / block_size_; }
    void cache_full_blocks(Request& request, int32_t num_tokens);

    BlockPool pool_;
    int32_t block_size_;
    bool enable_prefix_caching_;
    int64_t num_queried_tokens_ = 0, num_hit_tokens_ = 0;
};

}  // namespace moeserve::engine
