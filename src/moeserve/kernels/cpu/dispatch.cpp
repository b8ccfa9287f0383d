// Where the matmul tiles (behind linear bf16/f32/int8/int4/W4A8 and the MoE experts)
// and the GGUF dot kernels and tiles are picked by ISA, plus the scalar tiles of
// the `ref` level (the static-int8 full-range tile picks its own:
// linear_int8_static.cpp). The
// choice is a relaxed load of the process-wide level per tile call (a tile is
// at least one weight-row block, so the branch costs nothing).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "moeserve/core/dtype.h"
#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/cpu/gguf_dot_isa.h"
#include "moeserve/kernels/cpu/gguf_packed.h"
#include "moeserve/kernels/cpu/gguf_packed_isa.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/linear_w4a8.h"
#include "moeserve/kernels/cpu/matmul_tile.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"

namespace moeserve::kernels::cpu::detail {
namespace {

inline float widen(uint16_t h) { return bf16_to_f32(h); }
inline float widen(float f) { return f; }

template <typename W>
void tile_ref(const float* x, int64_t ldx, int64_t m, int64_t k, const W* w, int64_t n, float* out, int64_t ldo) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k; ++p) acc += x[i * ldx + p] * widen(w[j * k + p]);
            out[i * ldo + j] = acc;
        }
    }
}

}  // namespace

void* thread_scratch(int slot, int64_t bytes) {
    struct Buf {
        std::unique_ptr<std::byte[]> data;
        int64_t size = 0;
    };
    thread_local Buf bufs[8];
    Buf& b = bufs[slot];
    if (b.size < bytes) {
        const int64_t size = std::max<int64_t>(bytes, 2 * b.size);
        b.data = std::make_unique<std::byte[]>(size_t(size) + 64);
        b.size = size;
    }
    const auto addr = reinterpret_cast<uintptr_t>(b.data.get());
    return reinterpret_cast<void*>((addr + 63) & ~uintptr_t{63});
}

void matmul_tile_ref(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                     int64_t ldo) {
    tile_ref(x, ldx, m, k, w, n, out, ldo);
}
void matmul_tile_ref(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* out,
                     int64_t ldo) {
    tile_ref(x, ldx, m, k, w, n, out, ldo);
}

void matmul_tile_int8_ref(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                          const float* sw, int64_t n, float* out, int64_t ldo) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            int32_t acc = 0;
            for (int64_t p = 0; p < k; ++p) acc += int32_t{qx[i * ldx + p]} * int32_t{w[j * k + p]};
            out[i * ldo + j] = static_cast<float>(acc) * (sx[i] * sw[j]);
        }
    }
}

int64_t matmul_pack_floats() { return std::max(matmul_pack_floats_avx2(), matmul_pack_floats_avx512()); }

void matmul_tile(const float* x, int64_t ldx, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                 int64_t ldo, float* pack) {
    switch (active_isa()) {
        case Isa::kRef:
            matmul_tile_ref(x, ldx, m, k, w, n, out, ldo);
            return;
        case Isa::kAvx2:
            matmul_tile_avx2(x, ldx, m, k, w, n, out, ldo, pack);
            return;
        case Isa::kAvx512:
        case Isa::kAmx:
            matmul_tile_avx512(x, ldx, m, k, w, n, out, ldo, pack,
                               {.round_x = bf16_round_activations(), .gemv_row_blocks = gemv_row_blocks()});
            return;
    }
}

bool matmul_rounds_x(int64_t m) { return m > kGemvMaxRows && active_isa() >= Isa::kAvx512 && bf16_round_activations(); }

int64_t rounded_row_stride(int64_t k) { return (k + 31) / 32 * 32; }

void round_rows_bf16(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* xb) {
    MOESERVE_CHECK(active_isa() >= Isa::kAvx512, "round_rows_bf16 needs the avx512 level");
    round_rows_bf16_avx512(x, ldx, m, k, xb);
}

void matmul_tile_rounded(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* out,
                         int64_t ldo, float* pack) {
    MOESERVE_CHECK(matmul_rounds_x(m), "matmul_tile_rounded: the active tile keeps {} rows in f32", m);
    matmul_tile_rounded_avx512(xb, m, k, w, n, out, ldo, pack);
}

void matmul_tile(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* out, int64_t ldo,
                 float* pack) {
    // f32 weights (routers, every float weight under --dtype float32, tests) stay on the AVX2
    // path at every level above ref.
    if (active_isa() == Isa::kRef) {
        matmul_tile_ref(x, ldx, m, k, w, n, out, ldo);
    } else {
        matmul_tile_avx2(x, ldx, m, k, w, n, out, ldo, pack);
    }
}

void matmul_tile_int8(const int8_t* qx, int64_t ldx, const float* sx, int64_t m, int64_t k, const int8_t* w,
                      const float* sw, int64_t n, float* out, int64_t ldo) {
    switch (active_isa()) {
        case Isa::kRef:
            matmul_tile_int8_ref(qx, ldx, sx, m, k, w, sw, n, out, ldo);
            return;
        case Isa::kAvx2:
            matmul_tile_int8_avx2(qx, ldx, sx, m, k, w, sw, n, out, ldo);
            return;
        case Isa::kAvx512:
        case Isa::kAmx:
            matmul_tile_int8_avx512(qx, ldx, sx, m, k, w, sw, n, out, ldo, gemv_row_blocks());
            return;
    }
}

void matmul_tile_int4(const float* x, int64_t ldx, int64_t m, const Int4Weights& w, float* out, int64_t ldo) {
    const Isa isa = active_isa();
    if (isa == Isa::kRef) {
        matmul_tile_int4_ref(x, ldx, m, w, out, ldo);
    } else if (isa >= Isa::kAvx512) {
        matmul_tile_int4_avx512(x, ldx, m, w, out, ldo);
    } else {
        matmul_tile_int4_avx2(x, ldx, m, w, out, ldo);
    }
}

void matmul_tile_w4a8(const W4a8Rows& a, int64_t m, const Int4Weights& w, float* out, int64_t ldo) {
    const Isa isa = active_isa();
    if (isa == Isa::kRef) {
        matmul_tile_w4a8_ref(a, m, w, out, ldo);
    } else if (isa >= Isa::kAvx512) {
        matmul_tile_w4a8_avx512(a, m, w, out, ldo);
    } else {
        matmul_tile_w4a8_avx2(a, m, w, out, ldo);
    }
}

}  // namespace moeserve::kernels::cpu::detail

namespace moeserve::kernels::cpu {

namespace {

// The scalar reference with the kernels' signature (the ref ISA level).
template <GgmlType T>
float gguf_dot_ref_blocks(int64_t nb, const void* w, const void* a) {
    return gguf_vec_dot_ref(T, nb * ggml_traits(T).block_size, w, a);
}

}  // namespace

GgufDotKernel gguf_dot_kernel(GgmlType type) {
    MOESERVE_CHECK(gguf_dot_supported(type), "no GGUF dot product for {}", ggml_type_name(type));
    const Isa isa = active_isa();
    const bool ref = isa == Isa::kRef;
    const bool avx512 = isa >= Isa::kAvx512;  // VNNI comes with the avx512 level (isa.h)
    switch (type) {
        case GgmlType::kQ4_0:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kQ4_0>
                   : avx512 ? &detail::vec_dot_q4_0_q8_0_avx512
                            : &detail::vec_dot_q4_0_q8_0_avx2;
        case GgmlType::kQ4_1:
            return ref ? &gguf_dot_ref_blocks<GgmlType::kQ4_1> : &detail::vec_dot_q4_1_q8_0_avx2;
        case GgmlType::kQ5_0:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kQ5_0>
                   : avx512 ? &detail::vec_dot_q5_0_q8_0_avx512
                            : &detail::vec_dot_q5_0_q8_0_avx2;
        case GgmlType::kQ5_1:
            return ref ? &gguf_dot_ref_blocks<GgmlType::kQ5_1> : &detail::vec_dot_q5_1_q8_0_avx2;
        case GgmlType::kQ8_0:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kQ8_0>
                   : avx512 ? &detail::vec_dot_q8_0_q8_0_avx512
                            : &detail::vec_dot_q8_0_q8_0_avx2;
        case GgmlType::kMXFP4:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kMXFP4>
                   : avx512 ? &detail::vec_dot_mxfp4_q8_0_avx512
                            : &detail::vec_dot_mxfp4_q8_0_avx2;
        case GgmlType::kQ2_K:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kQ2_K>
                   : avx512 ? &detail::vec_dot_q2_k_q8_k_avx512
                            : &detail::vec_dot_q2_k_q8_k_avx2;
        case GgmlType::kQ3_K:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kQ3_K>
                   : avx512 ? &detail::vec_dot_q3_k_q8_k_avx512
                            : &detail::vec_dot_q3_k_q8_k_avx2;
        case GgmlType::kQ4_K:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kQ4_K>
                   : avx512 ? &detail::vec_dot_q4_k_q8_k_avx512
                            : &detail::vec_dot_q4_k_q8_k_avx2;
        case GgmlType::kQ5_K:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kQ5_K>
                   : avx512 ? &detail::vec_dot_q5_k_q8_k_avx512
                            : &detail::vec_dot_q5_k_q8_k_avx2;
        case GgmlType::kQ6_K:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kQ6_K>
                   : avx512 ? &detail::vec_dot_q6_k_q8_k_avx512
                            : &detail::vec_dot_q6_k_q8_k_avx2;
        case GgmlType::kF8E4M3x128:
            return ref      ? &gguf_dot_ref_blocks<GgmlType::kF8E4M3x128>
                   : avx512 ? &detail::vec_dot_f8_f32_avx512
                            : &detail::vec_dot_f8_f32_avx2;
        default:
            return nullptr;  // unreachable: checked above
    }
}

void quantize_gguf_activations(GgmlType act, const float* x, void* dst, int64_t n) {
    const GgmlTypeTraits traits = ggml_traits(act);
    const bool vectorized = active_isa() != Isa::kRef && (act == GgmlType::kQ8_0 || act == GgmlType::kQ8_K);
    if (!vectorized || n < 0 || n % traits.block_size != 0) {
        quantize_gguf(act, x, dst, n);  // which also checks n
        return;
    }
    if (act == GgmlType::kQ8_0) {
        detail::quantize_q8_0_avx2(x, dst, n);
    } else {
        detail::quantize_q8_k_avx2(x, dst, n);
    }
}

size_t GgufTiles::prepared_row_bytes(int64_t nb) const {
    if (prepare_ == nullptr) return 0;
    if (prepared_block_bytes_ != 0) return prepared_block_bytes_ * static_cast<size_t>(nb);
    return detail::kGgufPreparedStepBytes * static_cast<size_t>((nb + 1) / 2);
}

GgufTiles::GgufTiles(GgmlType type, int packed_rows) : dot_(gguf_dot_kernel(type)) {
    const Isa isa = active_isa();
    if (packed_rows != 1) {
        MOESERVE_CHECK(packed_rows == kGgufPackRows && gguf_has_packed_layout(type), "{} packed in {} rows",
                       ggml_type_name(type), packed_rows);
        const bool q8_0 = gguf_dot_activation_type(type) == GgmlType::kQ8_0;
        for (int c = 0; c < kGgufTileCols; ++c) {
            packed_[c] = isa == Isa::kRef      ? detail::gguf_packed_tile_ref(type, c + 1)
                         : isa >= Isa::kAvx512 ? detail::gguf_packed_tile_avx512(type, c + 1)
                                               : detail::gguf_packed_tile_avx2(type, c + 1);
        }
        if (isa >= Isa::kAvx512) {
            prepare_ = q8_0 ? &detail::gguf_prepare_packed_q8x2 : &detail::gguf_prepare_packed_q8kx2;
            prepared_block_bytes_ = q8_0 ? sizeof(detail::GgufPackedQ8x2Block) : sizeof(detail::GgufPackedQ8Kx2Block);
        } else if (isa != Isa::kRef && q8_0) {
            prepare_ = &detail::gguf_prepare_packed_q8;
            prepared_block_bytes_ = sizeof(detail::GgufPackedQ8Block);
        }
        return;
    }
    if (isa == Isa::kRef) return;
    const bool fp8 = type == GgmlType::kF8E4M3x128;
    const bool avx512 = isa >= Isa::kAvx512;
    if (avx512) prepare_ = detail::gguf_prepare_avx512(type);
    if (fp8) widen_ = avx512 ? &detail::f8_widen_avx512 : &detail::f8_widen_avx2;
    for (int r = 0; r < kGgufTileRows; ++r) {
        for (int c = 0; c < kGgufTileCols; ++c) {
            GgufTileFn tile = !fp8     ? (avx512 ? detail::gguf_tile_avx512(type, r + 1, c + 1) : nullptr)
                              : avx512 ? detail::f8_tile_avx512(r + 1, c + 1)
                                       : detail::f8_tile_avx2(r + 1, c + 1);
            // AVX2's tiles: the avx2 level's, and Q4_1 / Q5_1's at avx512, whose pair kernels are AVX2's
            if (tile == nullptr && !fp8) tile = detail::gguf_tile_avx2(type, r + 1, c + 1);
            tiles_[r][c] = tile;
            if (fp8)
                widened_[r][c] = avx512 ? detail::f32_tile_avx512(r + 1, c + 1) : detail::f32_tile_avx2(r + 1, c + 1);
        }
    }
}

float* GgufTiles::widen_buffer(int64_t floats) const {
    return static_cast<float*>(detail::thread_scratch(detail::kGgufWidenScratchSlot, floats * 4));
}

float gguf_vec_dot(GgmlType type, int64_t n, const void* w, const void* a) {
    const int64_t bs = ggml_traits(type).block_size;
    MOESERVE_CHECK(gguf_dot_supported(type) && n >= 0 && n % bs == 0, "type={} n={}", ggml_type_name(type), n);
    return gguf_dot_kernel(type)(n / bs, w, a);
}

}  // namespace moeserve::kernels::cpu
