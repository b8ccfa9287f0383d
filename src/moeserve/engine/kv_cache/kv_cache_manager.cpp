#include "moeserve/engine/kv_cache/kv_cache_manager.h"

#include <algorithm>

#include "moeserve/core/error.h"
#include "moeserve/engine/kv_cache/block_hash.h"

namespace moeserve::engine {

int64_t num_blocks_for_bytes(int64_t bytes, int64_t kv_bytes_per_token, int64_t block_size) {
    MOESERVE_CHECK(kv_bytes_per_token > 0 && block_size > 0, "kv bytes/token {} block size {}", kv_bytes_per_token,
                   block_size);
    return std::max<int64_t>(0, bytes / (kv_bytes_per_token * block_size));
}

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : pool_(num_blocks), block_size_(block_size), enable_prefix_caching_(enable_prefix_caching) {
    MOESERVE_CHECK(block_size > 0, "block size {}", block_size);
}

CachedPrefix KvCacheManager::find_cached_prefix(Request& request) {
    CachedPrefix prefix;
    if (!enable_prefix_caching_ || !request.block_ids.empty() || request.wants_prompt_logprobs()) return prefix;
    extend_block_hashes(request.block_hashes, root_block_hash(request.sampling.cache_salt), block_size_,
                        request.prompt_token_ids, request.output_token_ids);
    const int32_t max_blocks = (request.num_tokens() - 1) / block_size_;
    for (int32_t i = 0; i < max_blocks; ++i) {
        const auto block = pool_.lookup(request.block_hashes[static_cast<size_t>(i)]);
        if (!block) break;
        prefix.block_ids.push_back(*block);
    }
    prefix.num_tokens = static_cast<int32_t>(prefix.block_ids.size()) * block_size_;
    return prefix;
}

int32_t KvCacheManager::num_blocks_needed(const Request& request, int32_t num_new_tokens,
                                          const CachedPrefix& prefix) const {
    const int32_t total = request.num_computed_tokens + prefix.num_tokens + num_new_tokens;
    const auto have = static_cast<int32_t>(request.block_ids.size() + prefix.block_ids.size());
    int32_t needed = std::max(0, blocks_for_tokens(total) - have);
    for (int32_t b : prefix.block_ids) needed += pool_.ref_count(b) == 0 ? 1 : 0;  // free hits leave the free list
    return needed;
}

std::optional<NewBlocks> KvCacheManager::allocate_slots(Request& request, int32_t num_new_tokens,
                                                        const CachedPrefix& prefix, bool enter_in_cache) {
    MOESERVE_CHECK(prefix.block_ids.empty() || request.block_ids.empty(), "{}: prefix for a request with blocks",
                   request.request_id);
    if (!can_allocate(request, num_new_tokens, prefix)) return std::nullopt;
    if (enable_prefix_caching_ && request.block_ids.empty()) {  // an admission: count the lookup
        num_queried_tokens_ += request.num_tokens();
        num_hit_tokens_ += prefix.num_tokens;
    }
    pool_.touch(prefix.block_ids);
    request.block_ids.insert(request.block_ids.end(), prefix.block_ids.begin(), prefix.block_ids.end());
    request.num_computed_tokens += prefix.num_tokens;
    const int32_t total = request.num_computed_tokens + num_new_tokens;
    const int32_t num_new_blocks =
        std::max(0, blocks_for_tokens(total) - static_cast<int32_t>(request.block_ids.size()));
    NewBlocks out{pool_.allocate(num_new_blocks)};
    request.block_ids.insert(request.block_ids.end(), out.block_ids.begin(), out.block_ids.end());
    // NOTE(#5): blocks are entered in the cache before this step's forward writes them. That is
    // safe because a request that hits them in the same step is in the same forward, and the
    // model writes every token's K/V of a layer before that layer's attention reads any.
    if (enable_prefix_caching_ && enter_in_cache) cache_full_blocks(request, total);
    return out;
}

void KvCacheManager::cache_full_blocks(Request& request, int32_t num_tokens) {
    extend_block_hashes(request.block_hashes, root_block_hash(request.sampling.cache_salt), block_size_,
                        request.prompt_token_ids, request.output_token_ids);
    const int32_t num_full =
        std::min<int32_t>(num_tokens / block_size_, static_cast<int32_t>(request.block_hashes.size()));
    for (int32_t i = 0; i < num_full; ++i) {
        pool_.cache_block(request.block_ids[static_cast<size_t>(i)], request.block_hashes[static_cast<size_t>(i)]);
    }
}

void KvCacheManager::free_tail(Request& request, int32_t num_tokens) {
    const auto keep = static_cast<size_t>(blocks_for_tokens(num_tokens));
    if (request.block_ids.size() <= keep) return;
    std::vector<int32_t> reversed(request.block_ids.rbegin(),
                                  request.block_ids.rend() - static_cast<std::ptrdiff_t>(keep));
    pool_.free(reversed);
    request.block_ids.resize(keep);
}

void KvCacheManager::free(Request& request) {
    std::vector<int32_t> reversed(request.block_ids.rbegin(), request.block_ids.rend());
    pool_.free(reversed);
    request.block_ids.clear();
}

}  // namespace moeserve::engine
