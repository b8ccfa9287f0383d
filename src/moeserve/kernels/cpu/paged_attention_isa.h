// Internal: the AVX-512 flash-attention block behind paged_attention (paged_attention_avx2.cpp
// picks it by active_isa() and the shape). Plain types only, for the reason matmul_tile_isa.h
// gives: paged_attention_avx512.cpp keeps its intrinsics and helpers to itself.
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu::detail {

// Query rows per call: a flash block of up to 32 rows is two zmm of rows, so that each key's
// scores of the whole block are two vectors and the softmax runs across rows without horizontal
// reductions. Up to 8 rows (decode: the GQA heads of one token) take the decode kernel instead,
// where 16 keys are the lanes.
inline constexpr int64_t kFlashRows = 32;

// One kv head of one sequence's paged cache, as paged_attention.h lays it out.
struct FlashKvHead {
    const void* k_cache;
    const void* v_cache;
    const float* k_scale;  // fp8 only: [num_blocks, block_size, num_kv_heads]
    const float* v_scale;
    int cache_kind;  // 0 f32, 1 bf16, 2 fp8 e4m3
    int64_t block_size, num_kv_heads, head_dim, kv_head;
    const int32_t* block_table;
    float scale;  // softmax scale
};

// Up to kFlashRows query rows that read the same kv head: row r attends keys [0, pos[r]].
struct FlashRows {
    int64_t n;
    const float* q[kFlashRows];  // head_dim floats each
    float* out[kFlashRows];      // head_dim floats each
    float* lse[kFlashRows];      // null where not asked for
    int64_t pos[kFlashRows];
};

// The rows' attention by tiles of keys with an online softmax, in f32 (K and V widened exactly);
// only called at the avx512 level, for a head_dim that is a multiple of 16 (at most 256).
void flash_attend_avx512(const FlashKvHead& kv, const FlashRows& rows);

}  // namespace moeserve::kernels::cpu::detail
