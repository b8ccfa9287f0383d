#include "moeserve/engine/kv_cache/block_hash.h"

namespace moeserve::engine {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
    // splitmix64 finalizer over (h ^ v): every input bit reaches every output bit.
    uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace

uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> tokens) {
    uint64_t h = mix(parent_hash, tokens.size());
    for (int32_t t : tokens) h = mix(h, static_cast<uint32_t>(t));
    return h;
}

uint64_t root_block_hash(std::string_view cache_salt) {
    if (cache_salt.empty()) return kRootBlockHash;
    uint64_t h = mix(kRootBlockHash, cache_salt.size());
    for (unsigned char c : cache_salt) h = mix(h, c);
    return h;
}

void extend_block_hashes(std::vector<uint64_t>& hashes, uint64_t root, int32_t block_size,
                         std::span<const int32_t> prompt, std::span<const int32_t> outputs) {
    const size_t total = prompt.size() + outputs.size();
    const auto bs = static_cast<size_t>(block_size);
    std::vector<int32_t> block(bs);
    while ((hashes.size() + 1) * bs <= total) {
        const size_t begin = hashes.size() * bs;
        for (size_t i = 0; i < bs; ++i) {
            const size_t t = begin + i;
            block[i] = t < prompt.size() ? prompt[t] : outputs[t - prompt.size()];
        }
        hashes.push_back(hash_block_tokens(hashes.empty() ? root : hashes.back(), block));
    }
}

}  // namespace moeserve::engine
