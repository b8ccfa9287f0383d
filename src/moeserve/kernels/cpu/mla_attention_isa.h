// Internal: the AVX-512 MLA attention behind mla_attention (mla_attention_avx2.cpp picks it by
// active_isa() and the cache dtype). Plain types only, for the reason matmul_tile_isa.h gives.
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu::detail {

// Heads per call: one zmm of heads, so that a key's scores for all of them are one vector and the
// online softmax runs across heads without horizontal reductions.
inline constexpr int64_t kMlaFlashHeads = 16;

// One sequence's latent cache (mla_attention.h): f32, bf16, or fp8 e4m3 with its per-row scales.
struct MlaFlashCache {
    const void* cache;
    bool bf16;
    int64_t block_size, kv_lora_rank, rope_dim;
    const int32_t* block_table;
    const float* fp8_scale = nullptr;  // fp8: [slot][2] (the latent's, k_pe's); null: f32 or bf16
};

// The online softmax state of up to kMlaFlashHeads heads: acc [heads][kv_lora_rank] (not yet
// divided by l), m and l [heads].
struct MlaFlashState {
    float* acc;
    float* m;
    float* l;
};

// Heads q[0, n) (n <= kMlaFlashHeads; each kv_lora_rank + rope_dim floats) over keys [k0, k1)
// from a fresh state, scores times `scale`, in f32; only called at the avx512 level.
void mla_flash_keys_avx512(const MlaFlashCache& kv, const float* const* q, int64_t n, float scale, int64_t k0,
                           int64_t k1, const MlaFlashState& out);

}  // namespace moeserve::kernels::cpu::detail
