#include "moeserve/model/kv_cache.h"

#include <fmt/format.h>

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/kernels/backend.h"

namespace moeserve::model {

namespace {

// Bytes of one block of a [num_blocks, block_size, ...] tensor.
size_t slice_bytes(const Tensor& t) { return t.nbytes() / static_cast<size_t>(t.shape().dims()[0]); }

void check_range(int64_t block, int64_t num_blocks, int64_t first, int64_t count, int64_t parts) {
    MOESERVE_CHECK(block >= 0 && block < num_blocks, "KV block {} outside [0, {})", block, num_blocks);
    MOESERVE_CHECK(first >= 0 && count >= 0 && first + count <= parts, "KV parts [{}, {}) outside [0, {})", first,
                   first + count, parts);
}

// Copies parts [first, first + count) of block `block` of each tensor, in order, to `out` (or
// from `in` when out is null): each tensor is [num_blocks, block_size, parts, ...], so a token's
// row of a part range is one contiguous run.
void copy_parts(const std::vector<const Tensor*>& tensors, int64_t block, int64_t block_size, int64_t parts,
                int64_t first, int64_t count, const std::byte* in, std::byte* out) {
    for (const Tensor* t : tensors) {  // a Tensor's data() is writable through a const Tensor
        const size_t token_bytes = slice_bytes(*t) / static_cast<size_t>(block_size);
        const size_t part = token_bytes / static_cast<size_t>(parts);
        const size_t run = part * static_cast<size_t>(count);
        auto* base = static_cast<std::byte*>(t->data()) + slice_bytes(*t) * static_cast<size_t>(block) +
                     part * static_cast<size_t>(first);
        for (int64_t token = 0; token < block_size; ++token) {
            std::byte* row = base + token_bytes * static_cast<size_t>(token);
            if (out != nullptr) {
                std::memcpy(out, row, run);
                out += run;
            } else {
                std::memcpy(row, in, run);
                in += run;
            }
        }
    }
}

int64_t part_bytes_of(const std::vector<const Tensor*>& tensors, int64_t parts) {
    size_t n = 0;
    for (const Tensor* t : tensors) n += slice_bytes(*t);
    return static_cast<int64_t>(n) / parts;
}

bool is_cache_dtype(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF8E4M3; }

// The layout's dtype part: fp8 names its scales, so a change of their granularity changes it.
std::string layout_dtype(DType dtype, const char* fp8_scales) {
    if (dtype != DType::kF8E4M3) return std::string(dtype_name(dtype));
    return fmt::format("{} scales=F32/{}", dtype_name(dtype), fp8_scales);
}

}  // namespace

DType parse_kv_cache_dtype(const std::string& text, DType model_dtype) {
    if (text == "auto" || text.empty()) return model_dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
    if (text == "bf16" || text == "bfloat16") return DType::kBF16;
    if (text == "fp32" || text == "float32" || text == "float") return DType::kF32;
    if (text == "fp8" || text == "fp8_e4m3") return DType::kF8E4M3;
    raise(ErrorCode::kInvalidArgument,
          "--kv-cache-dtype {}: expected auto, bf16 (bfloat16), fp32 (float32) or fp8 (fp8_e4m3){}", text,
          text.rfind("fp8", 0) == 0 ? "; fp8 is e4m3 only here" : "");
}

std::string kv_cache_dtype_warning(DType kv_dtype) {
    if (kv_dtype != DType::kF8E4M3) return "";
    return "--kv-cache-dtype fp8 is experimental: keys/values (MLA: latent and rope key) are stored as e4m3 with an "
           "f32 scale per row, 3 mantissa bits; expect logits to move (docs/performance.md has the measured error)";
}

GqaKvCache::GqaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                       int64_t head_dim, DType dtype, KvSlice heads)
    : KvCache(num_blocks, block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      heads_(heads.total > 0 ? heads : KvSlice{0, num_kv_heads, num_kv_heads}),
      dtype_(dtype) {
    MOESERVE_CHECK(is_cache_dtype(dtype), "KV cache dtype {}", dtype_name(dtype));
    MOESERVE_CHECK(heads_.count == num_kv_heads && heads_.first >= 0 && heads_.first + heads_.count <= heads_.total,
                   "KV heads [{}, +{}) of {} for a cache of {}", heads_.first, heads_.count, heads_.total,
                   num_kv_heads);
    const kernels::Backend& backend = kernels::active_backend();
    for (int64_t i = 0; i < num_layers; ++i) {
        k_.push_back(backend.allocate(dtype, Shape{num_blocks, block_size, num_kv_heads, head_dim}));
        v_.push_back(backend.allocate(dtype, Shape{num_blocks, block_size, num_kv_heads, head_dim}));
        if (dtype == DType::kF8E4M3) {
            k_scale_.push_back(backend.allocate(DType::kF32, Shape{num_blocks, block_size, num_kv_heads}));
            v_scale_.push_back(backend.allocate(DType::kF32, Shape{num_blocks, block_size, num_kv_heads}));
        }
    }
}

kernels::PagedKvLayer GqaKvCache::layer(int64_t i) {
    const auto idx = static_cast<size_t>(i);
    kernels::PagedKvLayer out{k_[idx].data(), v_[idx].data(), num_blocks(), block_size(),
                              num_kv_heads_,  head_dim_,      dtype_};
    if (dtype_ == DType::kF8E4M3) {
        out.k_scale = k_scale_[idx].as<float>();
        out.v_scale = v_scale_[idx].as<float>();
    }
    return out;
}

std::vector<const Tensor*> GqaKvCache::tensors() const {
    std::vector<const Tensor*> out;
    out.reserve(4 * k_.size());
    for (size_t l = 0; l < k_.size(); ++l) {
        out.insert(out.end(), {&k_[l], &v_[l]});
        if (dtype_ == DType::kF8E4M3) out.insert(out.end(), {&k_scale_[l], &v_scale_[l]});
    }
    return out;
}

int64_t GqaKvCache::part_bytes() const { return part_bytes_of(tensors(), num_kv_heads_); }

void GqaKvCache::read_parts(int64_t block, int64_t first, int64_t count, std::byte* out) const {
    check_range(block, num_blocks(), first, count, num_kv_heads_);
    copy_parts(tensors(), block, block_size(), num_kv_heads_, first, count, nullptr, out);
}

void GqaKvCache::write_parts(int64_t block, int64_t first, int64_t count, const std::byte* in) {
    check_range(block, num_blocks(), first, count, num_kv_heads_);
    copy_parts(tensors(), block, block_size(), num_kv_heads_, first, count, in, nullptr);
}

std::string GqaKvCache::layout() const {
    return fmt::format("gqa layers={} block_size={} kv_heads={} head_dim={} dtype={}", k_.size(), block_size(),
                       heads_.total, head_dim_, layout_dtype(dtype_, "token/kv_head"));
}

MlaKvCache::MlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_lora_rank,
                       int64_t rope_dim, DType dtype)
    : KvCache(num_blocks, block_size), kv_lora_rank_(kv_lora_rank), rope_dim_(rope_dim), dtype_(dtype) {
    MOESERVE_CHECK(is_cache_dtype(dtype), "latent cache dtype {}", dtype_name(dtype));
    const kernels::Backend& backend = kernels::active_backend();
    for (int64_t i = 0; i < num_layers; ++i) {
        cache_.push_back(backend.allocate(dtype, Shape{num_blocks, block_size, kv_lora_rank + rope_dim}));
        if (dtype == DType::kF8E4M3) scale_.push_back(backend.allocate(DType::kF32, Shape{num_blocks, block_size, 2}));
    }
}

kernels::PagedLatentLayer MlaKvCache::layer(int64_t i) {
    const auto idx = static_cast<size_t>(i);
    kernels::PagedLatentLayer out{cache_[idx].data(), num_blocks(), block_size(), kv_lora_rank_, rope_dim_, dtype_};
    if (dtype_ == DType::kF8E4M3) out.scale = scale_[idx].as<float>();
    return out;
}

}  // namespace moeserve::model

namespace moeserve::model {

std::vector<const Tensor*> MlaKvCache::tensors() const {
    std::vector<const Tensor*> out;
    out.reserve(2 * cache_.size());
    for (size_t l = 0; l < cache_.size(); ++l) {
        out.push_back(&cache_[l]);
        if (dtype_ == DType::kF8E4M3) out.push_back(&scale_[l]);
    }
    return out;
}

int64_t MlaKvCache::part_bytes() const { return part_bytes_of(tensors(), 1); }

void MlaKvCache::read_parts(int64_t block, int64_t first, int64_t count, std::byte* out) const {
    check_range(block, num_blocks(), first, count, 1);
    copy_parts(tensors(), block, block_size(), 1, first, count, nullptr, out);
}

void MlaKvCache::write_parts(int64_t block, int64_t first, int64_t count, const std::byte* in) {
    check_range(block, num_blocks(), first, count, 1);
    copy_parts(tensors(), block, block_size(), 1, first, count, in, nullptr);
}

std::string MlaKvCache::layout() const {
    return fmt::format("mla layers={} block_size={} kv_lora_rank={} rope_dim={} dtype={}", cache_.size(), block_size(),
                       kv_lora_rank_, rope_dim_, layout_dtype(dtype_, "token/(latent, rope)"));
}

}  // namespace moeserve::model
