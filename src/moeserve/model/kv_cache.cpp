#include "moeserve/model/kv_cache.h"

namespace moeserve::model {

GqaKvCache::GqaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                       int64_t head_dim)
    : KvCache(num_blocks, block_size), num_kv_heads_(num_kv_heads), head_dim_(head_dim) {
    for (int64_t i = 0; i < num_layers; ++i) {
        k_.emplace_back(DType::kF32, Shape{num_blocks, block_size, num_kv_heads, head_dim});
        v_.emplace_back(DType::kF32, Shape{num_blocks, block_size, num_kv_heads, head_dim});
    }
}

kernels::cpu::PagedKvLayer GqaKvCache::layer(int64_t i) {
    const auto idx = static_cast<size_t>(i);
    return {k_[idx].as<float>(), v_[idx].as<float>(), num_blocks(), block_size(), num_kv_heads_, head_dim_};
}

MlaKvCache::MlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_lora_rank,
                       int64_t rope_dim)
    : KvCache(num_blocks, block_size), kv_lora_rank_(kv_lora_rank), rope_dim_(rope_dim) {
    for (int64_t i = 0; i < num_layers; ++i) {
        cache_.emplace_back(DType::kF32, Shape{num_blocks, block_size, kv_lora_rank + rope_dim});
    }
}

kernels::cpu::PagedLatentLayer MlaKvCache::layer(int64_t i) {
    return {cache_[static_cast<size_t>(i)].as<float>(), num_blocks(), block_size(), kv_lora_rank_, rope_dim_};
}

}  // namespace moeserve::model
