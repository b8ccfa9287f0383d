#include "moeserve/model/kv_cache.h"

#include "moeserve/core/error.h"

namespace moeserve::model {

DType parse_kv_cache_dtype(const std::string& text, DType model_dtype) {
    if (text == "auto" || text.empty()) return model_dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
    if (text == "bf16" || text == "bfloat16") return DType::kBF16;
    if (text == "fp32" || text == "float32" || text == "float") return DType::kF32;
    if (text.rfind("fp8", 0) == 0) {
        raise(ErrorCode::kInvalidArgument,
              "--kv-cache-dtype {}: an fp8 KV cache is not implemented; use auto, bf16 or fp32", text);
    }
    raise(ErrorCode::kInvalidArgument, "--kv-cache-dtype {}: expected auto, bf16 (bfloat16) or fp32 (float32)", text);
}

GqaKvCache::GqaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                       int64_t head_dim, DType dtype)
    : KvCache(num_blocks, block_size), num_kv_heads_(num_kv_heads), head_dim_(head_dim), dtype_(dtype) {
    MOESERVE_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "KV cache dtype {}", dtype_name(dtype));
    for (int64_t i = 0; i < num_layers; ++i) {
        k_.emplace_back(dtype, Shape{num_blocks, block_size, num_kv_heads, head_dim});
        v_.emplace_back(dtype, Shape{num_blocks, block_size, num_kv_heads, head_dim});
    }
}

kernels::cpu::PagedKvLayer GqaKvCache::layer(int64_t i) {
    const auto idx = static_cast<size_t>(i);
    return {k_[idx].data(), v_[idx].data(), num_blocks(), block_size(), num_kv_heads_, head_dim_, dtype_};
}

MlaKvCache::MlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_lora_rank,
                       int64_t rope_dim, DType dtype)
    : KvCache(num_blocks, block_size), kv_lora_rank_(kv_lora_rank), rope_dim_(rope_dim), dtype_(dtype) {
    MOESERVE_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "latent cache dtype {}", dtype_name(dtype));
    for (int64_t i = 0; i < num_layers; ++i) {
        cache_.emplace_back(dtype, Shape{num_blocks, block_size, kv_lora_rank + rope_dim});
    }
}

kernels::cpu::PagedLatentLayer MlaKvCache::layer(int64_t i) {
    return {cache_[static_cast<size_t>(i)].data(), num_blocks(), block_size(), kv_lora_rank_, rope_dim_, dtype_};
}

}  // namespace moeserve::model
