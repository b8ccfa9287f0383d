// The dot products' activation quantizers (q8_0, q8_K) in AVX2: quantize_gguf's bits (the
// reference quantize_row_q8_0 / quantize_row_q8_K of gguf_quantize_ref.cpp) for finite inputs.
// Each step is the reference's: the largest magnitude by max (exact in any order), the same
// scalar scale, the products x * scale in f32, rounded half to even (cvtps2dq under the default
// rounding mode, as nearbyint), so only the order of the exact steps differs. Built with
// -ffp-contract=off like the reference.
#include <immintrin.h>

#include <cstring>

#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot_isa.h"
#include "moeserve/kernels/cpu/simd_avx2.h"

namespace moeserve::kernels::cpu::detail {

namespace {

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// max(|x[0..n)|), n a multiple of 8; NaNs are skipped (max_ps returns its second operand when
// the first is NaN), as the reference's std::max and signed_absmax skip them.
inline float abs_max(const float* x, int n) {
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + i)), m);
    return simd::hmax(m);
}

// The first element of x whose magnitude is amax (> 0, present in x): signed_absmax's pick.
inline float first_of_magnitude(const float* x, int n, float amax) {
    const __m256 target = _mm256_set1_ps(amax);
    for (int i = 0; i < n; i += 8) {
        const int hits = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + i)), target, _CMP_EQ_OQ));
        if (hits != 0) return x[i + __builtin_ctz(static_cast<unsigned>(hits))];
    }
    return 0.0f;  // unreachable for amax taken from x
}

// round_half_even(x[0..32) * scale) -> four vectors of 8 int32, at most `hi` each.
inline void round_scaled(const float* x, __m256 scale, __m256i hi, __m256i q[4]) {
    for (int v = 0; v < 4; ++v) {
        q[v] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * v), scale)), hi);
    }
}

// Four vectors of 8 int32 in [-128, 127] -> 32 int8 in element order.
inline void store_bytes(const __m256i q[4], int8_t* dst) {
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);  // lanes interleave: 0-3 8-11 4-7 12-15
    const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b = _mm256_packs_epi16(w01, w23);  // 0-3 8-11 16-19 24-27 4-7 12-15 20-23 28-31
    const __m256i ordered = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), ordered);
}

// The sums of each 16 int32 (q[0] + q[1], q[2] + q[3]) of two groups of four vectors: 4 sums.
inline __m128i sums_of_16(const __m256i q[8]) {
    const __m256i s0 = _mm256_add_epi32(q[0], q[1]);
    const __m256i s1 = _mm256_add_epi32(q[2], q[3]);
    const __m256i s2 = _mm256_add_epi32(q[4], q[5]);
    const __m256i s3 = _mm256_add_epi32(q[6], q[7]);
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

}  // namespace

void quantize_q8_0_avx2(const float* x, void* dst, int64_t n) {
    auto* blocks = static_cast<BlockQ8_0*>(dst);
    for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
        const float amax = abs_max(x, kQK8_0);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        __m256i q[4];
        round_scaled(x, _mm256_set1_ps(id), _mm256_set1_epi32(127), q);
        store_bytes(q, blocks[b].qs);
        store_f16(blocks[b].d, amax / 127.0f);
    }
}

void quantize_q8_k_avx2(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, out += sizeof(BlockQ8_K)) {
        BlockQ8_K block;  // dst need not be 4-byte aligned
        std::memset(&block, 0, sizeof(block));
        const float amax = abs_max(x, kQK_K);
        if (amax != 0.0f) {
            const float iscale = -127.0f / first_of_magnitude(x, kQK_K, amax);
            for (int g = 0; g < kQK_K / 64; ++g) {  // 64 elements: 4 bsums
                __m256i q[8];
                round_scaled(x + 64 * g, _mm256_set1_ps(iscale), _mm256_set1_epi32(127), q);
                round_scaled(x + 64 * g + 32, _mm256_set1_ps(iscale), _mm256_set1_epi32(127), q + 4);
                store_bytes(q, block.qs + 64 * g);
                store_bytes(q + 4, block.qs + 64 * g + 32);
                const __m128i sums = _mm_packs_epi32(sums_of_16(q), _mm_setzero_si128());
                _mm_storel_epi64(reinterpret_cast<__m128i*>(block.bsums + 4 * g), sums);
            }
            block.d = 1.0f / iscale;
        }
        std::memcpy(out, &block, sizeof(block));
    }
}

}  // namespace moeserve::kernels::cpu::detail
