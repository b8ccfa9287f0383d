// KV cache storage, owned here and nowhere else; the engine's KV cache manager owns the block
// *ids*. Each architecture creates its own kind (GQA keys/values, or MLA's compressed latent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/kernels/cpu/mla_attention.h"
#include "moeserve/kernels/cpu/paged_attention.h"

namespace moeserve::model {

class KvCache {
public:
    KvCache(int64_t num_blocks, int64_t block_size) : num_blocks_(num_blocks), block_size_(block_size) {}
    virtual ~KvCache() = default;
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    int64_t num_blocks() const { return num_blocks_; }
    int64_t block_size() const { return block_size_; }

    // One block of every layer as one byte string (PD disaggregation ships blocks between
    // instances): each layer's tensors in order, each the block's [block_size, ...] slice. Two
    // caches can exchange blocks when their layout() strings are equal. read_block may run on
    // another thread than the forwards as long as nobody writes that block meanwhile (the
    // engine keeps a block it ships or receives out of every batch); likewise write_block.
    virtual int64_t block_bytes() const = 0;
    virtual void read_block(int64_t block, std::byte* out) const = 0;
    virtual void write_block(int64_t block, const std::byte* in) = 0;
    // What the bytes mean: kind, layers, block size, per-token shape, dtype.
    virtual std::string layout() const = 0;

private:
    int64_t num_blocks_;
    int64_t block_size_;
};

// The KV cache's element type from --kv-cache-dtype: "auto" (the checkpoint's dtype:
// model_dtype, bf16 for these checkpoints; f32 for an f32 one), "bf16"/"bfloat16", "fp32"/
// "float32"/"float", "fp8"/"fp8_e4m3" (experimental: e4m3 with f32 scales per row, kF8E4M3).
// Raises Error(kInvalidArgument) naming the accepted values otherwise (fp8_e5m2 among them).
DType parse_kv_cache_dtype(const std::string& text, DType model_dtype);

// The warning to log at startup for a KV cache of this dtype ("" when there is none): fp8 is
// experimental.
std::string kv_cache_dtype_warning(DType kv_dtype);

// Keys and values per layer, f32, bf16 or fp8 e4m3, layout (kernels/cpu/paged_attention.h):
//   k[layer], v[layer]: [num_blocks, block_size, num_kv_heads, head_dim]
//   fp8 only, k_scale[layer], v_scale[layer]: [num_blocks, block_size, num_kv_heads] f32
// A block's bytes (read_block) are, per layer, k, v and (fp8) k_scale, v_scale.
class GqaKvCache : public KvCache {
public:
    GqaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
               DType dtype = DType::kF32);

    kernels::cpu::PagedKvLayer layer(int64_t i);
    DType dtype() const { return dtype_; }
    int64_t block_bytes() const override;
    void read_block(int64_t block, std::byte* out) const override;
    void write_block(int64_t block, const std::byte* in) override;
    std::string layout() const override;
    // The scales of an fp8 cache count: 2 x num_kv_heads x 4 bytes per token and layer.
    static int64_t bytes_per_token(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                                   DType dtype = DType::kF32) {
        const int64_t scale_bytes = dtype == DType::kF8E4M3 ? static_cast<int64_t>(sizeof(float)) : 0;
        return num_layers * 2 * num_kv_heads * (head_dim * static_cast<int64_t>(dtype_size(dtype)) + scale_bytes);
    }

private:
    // Every tensor, in block-byte order.
    std::vector<const Tensor*> tensors() const;

    int64_t num_kv_heads_, head_dim_;
    DType dtype_;
    std::vector<Tensor> k_, v_;
    std::vector<Tensor> k_scale_, v_scale_;  // fp8 only
};

// Multi-head latent attention (DeepSeek): per layer only the compressed latent (after
// kv_a_layernorm) and the shared rope key (after RoPE), f32, bf16 or fp8 e4m3, layout
// (kernels/cpu/mla_attention.h):
//   cache[layer]: [num_blocks, block_size, kv_lora_rank + rope_dim]
//   fp8 only, scale[layer]: [num_blocks, block_size, 2] f32 (the latent's, k_pe's)
// A block's bytes (read_block) are, per layer, cache and (fp8) scale.
class MlaKvCache : public KvCache {
public:
    MlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_lora_rank, int64_t rope_dim,
               DType dtype = DType::kF32);

    kernels::cpu::PagedLatentLayer layer(int64_t i);
    DType dtype() const { return dtype_; }
    int64_t block_bytes() const override;
    void read_block(int64_t block, std::byte* out) const override;
    void write_block(int64_t block, const std::byte* in) override;
    std::string layout() const override;
    // The scales of an fp8 cache count: 2 x 4 bytes per token and layer.
    static int64_t bytes_per_token(int64_t num_layers, int64_t kv_lora_rank, int64_t rope_dim,
                                   DType dtype = DType::kF32) {
        const int64_t scale_bytes = dtype == DType::kF8E4M3 ? 2 * static_cast<int64_t>(sizeof(float)) : 0;
        return num_layers * ((kv_lora_rank + rope_dim) * static_cast<int64_t>(dtype_size(dtype)) + scale_bytes);
    }

private:
    // Every tensor, in block-byte order.
    std::vector<const Tensor*> tensors() const;

    int64_t kv_lora_rank_, rope_dim_;
    DType dtype_;
    std::vector<Tensor> cache_;
    std::vector<Tensor> scale_;  // fp8 only
};

}  // namespace moeserve::model
