// Internal: the AVX-512 flash-attention block behind paged_attention (paged_attention_avx2.cpp
// picks it by active_isa() and the shape). Plain types only, for the reason matmul_tile_isa.h
// gives: paged_attention_avx512.cpp keeps its intrinsics and helpers to itself.
#pragma once

#include <cstdint>

namespace moeserve::kernels::cpu::detail {

// Query rows per call: a flash block of up to 32 rows is two zmm of rows, so that each key's
// scores of the whole block are two vectors and the softmax runs across rows without horizontal
// reductions. Up to kDecodeRows rows per kv head (decode: the GQA heads of one token) take the
// decode kernel instead, where 16 keys are the lanes.
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
    float scale;     // softmax scale
    int64_t window;  // sliding window: a row at position pos attends keys (pos - window, pos]; 0: all keys
};

// Up to kFlashRows query rows that read the same kv head: row r attends keys [0, pos[r]] (those
// of them inside its sliding window, FlashKvHead::window).
struct FlashRows {
    int64_t n;
    const float* q[kFlashRows];  // head_dim floats each
    float* out[kFlashRows];      // head_dim floats each
    float* lse[kFlashRows];      // null where not asked for
    int64_t pos[kFlashRows];
    float sink[kFlashRows];  // the head's sink logit (PagedAttentionArgs::sinks), -inf without
};

// Keys go by segments of kSegmentKeys from key 0: each segment's softmax starts afresh, and the
// segments' results (max m, sum l, unnormalized output o) are merged in key order. Both kernels
// do this, so a row has the same bits in a prefill chunk and decoded alone, and a long decode
// can hand its segments to different threads (split-KV) and merge them after. A tile or segment
// with no key in a row's window leaves that row's state exactly as it was (its keys weigh 0 and
// alpha is 1), so the kernels skip those before every row's window: the same bits, less reading.
inline constexpr int64_t kSegmentKeys = 256;

// Up to this many query rows per kv head take the decode kernel (keys as the lanes).
inline constexpr int64_t kDecodeRows = 8;

// The rows' attention by tiles of keys with an online softmax, in f32 (K and V widened exactly);
// only called at the avx512 level, for a head_dim that is a multiple of 16 (at most 256).
void flash_attend_avx512(const FlashKvHead& kv, const FlashRows& rows);

// The query rows of one decode-shaped sequence (at most kDecodeRows per kv head), num_kv_heads
// kv heads from FlashKvHead::kv_head on: row r reads kv head kv_head + r / rows_per_head and
// attends keys [0, pos[r]].
struct FlashDecodeRows {
    int64_t num_kv_heads;
    int64_t rows_per_head;
    const float* const* q;  // [num_kv_heads * rows_per_head], head_dim floats each
    const int64_t* pos;
};

// One segment's result per row: o [rows][head_dim] (not yet divided by l), m and l [rows].
struct FlashPartial {
    float* o;
    float* m;
    float* l;
};

// The first key a row at position `pos` attends: the start of its sliding window of `window`
// keys (0 without one). Defined in paged_attention_avx2.cpp (not inline: see the note at the top).
int64_t window_start(int64_t window, int64_t pos);

// The rows' attention over keys [segment * kSegmentKeys, +kSegmentKeys) (and up to each row's
// position, from its window's start), tile by tile across all kv heads so that each block of the cache is read in one
// pass; rows that see no key of the segment get m = -inf, l = 0, o = 0.
void flash_decode_segment_avx512(const FlashKvHead& kv, const FlashDecodeRows& rows, int64_t segment,
                                 const FlashPartial& out);

// total = total merged with the next segment `next` (rows x head_dim), exactly as the flash block
// merges its segments; a total with m = -inf everywhere is empty.
void flash_merge_avx512(const FlashPartial& total, const FlashPartial& next, int64_t rows, int64_t head_dim);

// out[r] = total.o[r] / l[r]; lse[r] (where not null) = m + log(l[r]); l[r] = total.l[r] +
// exp(sink[r] - m) (the attention sink's share of the denominator; -inf: none).
void flash_finish_avx512(const FlashPartial& total, int64_t rows, int64_t head_dim, float* const* out,
                         float* const* lse, const float* sink);

}  // namespace moeserve::kernels::cpu::detail
