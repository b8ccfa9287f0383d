// KV cache storage, owned here and nowhere else, in the memory of the kernel backend active when
// it is created (kernels/backend.h); the engine's KV cache manager owns the block *ids*. Each
// architecture creates its own kind (GQA keys/values, or MLA's compressed latent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "moeserve/core/tensor.h"
#include "moeserve/kernels/attention_types.h"

namespace moeserve::model {

// Which of the model's KV "parts" a cache holds. A part is what tensor parallelism splits: one
// KV head of a GQA cache (a TP rank holds a range of them, or one replicated head), or MLA's
// latent, which every rank holds whole (one part of one).
struct KvSlice {
    int64_t first = 0;  // the model's part index of this cache's part 0
    int64_t count = 1;  // parts held
    int64_t total = 1;  // the model's parts
    bool operator==(const KvSlice&) const = default;
};

class KvCache {
public:
    KvCache(int64_t num_blocks, int64_t block_size) : num_blocks_(num_blocks), block_size_(block_size) {}
    virtual ~KvCache() = default;
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    int64_t num_blocks() const { return num_blocks_; }
    int64_t block_size() const { return block_size_; }

    // Blocks as byte strings (PD disaggregation ships them between instances, whole or a range of
    // parts, so that instances of different TP sizes exchange KV): parts [first, first + count)
    // of this cache (local indexes) of one block, every layer's tensors in order, each tensor's
    // [block_size, parts, ...] slice restricted to those parts. Caches whose layout() strings
    // are equal exchange part bytes. read_parts may run on another thread than the forwards as
    // long as nobody writes that block meanwhile (the engine keeps a block it ships or receives
    // out of every batch); likewise write_parts.
    virtual KvSlice slice() const { return {}; }
    virtual int64_t part_bytes() const = 0;  // one part of one block
    virtual void read_parts(int64_t block, int64_t first, int64_t count, std::byte* out) const = 0;
    virtual void write_parts(int64_t block, int64_t first, int64_t count, const std::byte* in) = 0;
    int64_t block_bytes() const { return slice().count * part_bytes(); }
    void read_block(int64_t block, std::byte* out) const { read_parts(block, 0, slice().count, out); }
    void write_block(int64_t block, const std::byte* in) { write_parts(block, 0, slice().count, in); }
    // What a part's bytes mean, and how many parts the model has: kind, layers, block size,
    // per-token shape, dtype. The same on every TP rank of an instance.
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

// Keys and values per layer, f32, bf16 or fp8 e4m3, layout (kernels/attention_types.h):
//   k[layer], v[layer]: [num_blocks, block_size, num_kv_heads, head_dim]
//   fp8 only, k_scale[layer], v_scale[layer]: [num_blocks, block_size, num_kv_heads] f32
// A block's bytes (read_parts) are, per layer, k, v and (fp8) k_scale, v_scale; a part is one
// KV head.
class GqaKvCache : public KvCache {
public:
    // heads: the model's KV heads this cache holds (default: all num_kv_heads of them).
    GqaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
               DType dtype = DType::kF32, KvSlice heads = {0, 0, 0});

    kernels::PagedKvLayer layer(int64_t i);
    DType dtype() const { return dtype_; }
    KvSlice slice() const override { return heads_; }
    int64_t part_bytes() const override;
    void read_parts(int64_t block, int64_t first, int64_t count, std::byte* out) const override;
    void write_parts(int64_t block, int64_t first, int64_t count, const std::byte* in) override;
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
    KvSlice heads_;
    DType dtype_;
    std::vector<Tensor> k_, v_;
    std::vector<Tensor> k_scale_, v_scale_;  // fp8 only
};

// Multi-head latent attention (DeepSeek): per layer only the compressed latent (after
// kv_a_layernorm) and the shared rope key (after RoPE), f32, bf16 or fp8 e4m3, layout
// (kernels/attention_types.h):
//   cache[layer]: [num_blocks, block_size, kv_lora_rank + rope_dim]
//   fp8 only, scale[layer]: [num_blocks, block_size, 2] f32 (the latent's, k_pe's)
// A block's bytes (read_parts) are, per layer, cache and (fp8) scale; the block is one part.
class MlaKvCache : public KvCache {
public:
    MlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_lora_rank, int64_t rope_dim,
               DType dtype = DType::kF32);

    kernels::PagedLatentLayer layer(int64_t i);
    DType dtype() const { return dtype_; }
    int64_t part_bytes() const override;
    void read_parts(int64_t block, int64_t first, int64_t count, std::byte* out) const override;
    void write_parts(int64_t block, int64_t first, int64_t count, const std::byte* in) override;
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
