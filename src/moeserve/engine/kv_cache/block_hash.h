// Block hashes for prefix caching: a full block's hash chains its parent's hash with its token
// ids, so equal hashes mean equal whole prefixes (vLLM's hash_block_tokens).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace moeserve::engine {

// Hash of the block that follows the prefix hashed as parent_hash (kRootBlockHash for the first
// block) and holds `tokens`. Deterministic across runs and machines.
// NOTE(#5): 64-bit, not SHA-256 as vLLM offers: a collision (p ~ 2^-64 per pair) would serve a
// wrong prefix; acceptable for one process's cache, not for a shared/persistent one.
inline constexpr uint64_t kRootBlockHash = 0x6d6f657365727665ull;  // "moeserve"
uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> tokens);

// The parent hash of a sequence's first block: kRootBlockHash, or one derived from the request's
// cache_salt, so that differently salted requests never share a block.
uint64_t root_block_hash(std::string_view cache_salt);

// Extends `hashes` (the hashes of the first hashes.size() full blocks of tokens, chained from
// root) to cover every full block of `tokens`.
void extend_block_hashes(std::vector<uint64_t>& hashes, uint64_t root, int32_t block_size,
                         std::span<const int32_t> prompt, std::span<const int32_t> outputs);

}  // namespace moeserve::engine
