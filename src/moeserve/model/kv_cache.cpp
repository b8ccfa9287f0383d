#include "moeserve/model/kv_cache.h"

#include <fmt/format.h>

#include <cstring>

#include "moeserve/core/error.h"

namespace moeserve::model {

namespace {

// Bytes of one block of a [num_blocks, block_size, ...] tensor.
size_t slice_bytes(const Tensor& t) { return t.nbytes() / static_cast<size_t>(t.shape().dims()[0]); }

// Copies block `block` of each tensor, in order, to out (or from in).
void copy_out(const std::vector<const Tensor*>& tensors, int64_t block, std::byte* out) {
    for (const Tensor* t : tensors) {
        const size_t n = slice_bytes(*t);
        std::memcpy(out, static_cast<const std::byte*>(t->data()) + n * static_cast<size_t>(block), n);
        out += n;
    }
}
void copy_in(const std::vector<Tensor*>& tensors, int64_t block, const std::byte* in) {
    for (Tensor* t : tensors) {
        const size_t n = slice_bytes(*t);
        std::memcpy(static_cast<std::byte*>(t->data()) + n * static_cast<size_t>(block), in, n);
        in += n;
    }
}

void check_block(int64_t block, int64_t num_blocks) {
    MOESERVE_CHECK(block >= 0 && block < num_blocks, "KV block {} outside [0, {})", block, num_blocks);
}

}  // namespace

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

int64_t GqaKvCache::block_bytes() const {
    return 2 * static_cast<int64_t>(k_.size()) * block_size() * num_kv_heads_ * head_dim_ *
           static_cast<int64_t>(dtype_size(dtype_));
}

void GqaKvCache::read_block(int64_t block, std::byte* out) const {
    check_block(block, num_blocks());
    std::vector<const Tensor*> tensors;
    for (size_t l = 0; l < k_.size(); ++l) tensors.insert(tensors.end(), {&k_[l], &v_[l]});
    copy_out(tensors, block, out);
}

void GqaKvCache::write_block(int64_t block, const std::byte* in) {
    check_block(block, num_blocks());
    std::vector<Tensor*> tensors;
    for (size_t l = 0; l < k_.size(); ++l) tensors.insert(tensors.end(), {&k_[l], &v_[l]});
    copy_in(tensors, block, in);
}

std::string GqaKvCache::layout() const {
    return fmt::format("gqa layers={} block_size={} kv_heads={} head_dim={} dtype={}", k_.size(), block_size(),
                       num_kv_heads_, head_dim_, dtype_name(dtype_));
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

namespace moeserve::model {

int64_t MlaKvCache::block_bytes() const {
    return static_cast<int64_t>(cache_.size()) * block_size() * (kv_lora_rank_ + rope_dim_) *
           static_cast<int64_t>(dtype_size(dtype_));
}

void MlaKvCache::read_block(int64_t block, std::byte* out) const {
    check_block(block, num_blocks());
    std::vector<const Tensor*> tensors;
    for (const auto& t : cache_) tensors.push_back(&t);
    copy_out(tensors, block, out);
}

void MlaKvCache::write_block(int64_t block, const std::byte* in) {
    check_block(block, num_blocks());
    std::vector<Tensor*> tensors;
    for (auto& t : cache_) tensors.push_back(&t);
    copy_in(tensors, block, in);
}

std::string MlaKvCache::layout() const {
    return fmt::format("mla layers={} block_size={} kv_lora_rank={} rope_dim={} dtype={}", cache_.size(), block_size(),
                       kv_lora_rank_, rope_dim_, dtype_name(dtype_));
}

}  // namespace moeserve::model
