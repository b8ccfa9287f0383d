#include "moeserve/kernels/cpu/gguf_packed.h"

#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/cpu/gguf_packed_isa.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/kernels/cpu/matmul_tile_isa.h"

namespace moeserve::kernels::cpu {
namespace {

// One run of a block's bytes [offset, offset + bytes): gathered (interleave false: unit u of rows
// 0-7 in order, then unit u + 1) or interleaved by row pairs (p, p + 4) in `unit`-byte chunks.
struct Segment {
    int offset, bytes, unit;
    bool interleave;
};

struct PackedLayout {
    int nseg = 0;
    Segment seg[5];
};

// The segments of each type's packed block, in the order the packed block holds them. The
// kernels (gguf_packed_avx2.cpp) read these offsets: d first, then the rest as listed.
PackedLayout layout_of(GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_0:  // d, qs
            return {2, {{0, 2, 2, false}, {2, 16, 16, true}}};
        case GgmlType::kQ5_0:  // d, qh, qs
            return {3, {{0, 2, 2, false}, {2, 4, 4, false}, {6, 16, 16, true}}};
        case GgmlType::kQ4_1:  // d, m, qs
            return {3, {{0, 2, 2, false}, {2, 2, 2, false}, {4, 16, 16, true}}};
        case GgmlType::kQ5_1:  // d, m, qh, qs
            return {4, {{0, 2, 2, false}, {2, 2, 2, false}, {4, 4, 4, false}, {8, 16, 16, true}}};
        case GgmlType::kQ8_0:  // d, qs
            return {2, {{0, 2, 2, false}, {2, 32, 16, true}}};
        case GgmlType::kMXFP4:  // e, qs
            return {2, {{0, 1, 1, false}, {1, 16, 16, true}}};
        case GgmlType::kQ2_K:  // d, dmin, scales (8-byte chunks: 8 scales of a row pair's each), qs
            return {4, {{80, 2, 2, false}, {82, 2, 2, false}, {0, 16, 8, true}, {16, 64, 16, true}}};
        case GgmlType::kQ3_K:  // d, the 12 scale bytes as three 4-byte units of a row pair's each, hmask, qs
            return {4, {{108, 2, 2, false}, {96, 12, 4, true}, {0, 32, 16, true}, {32, 64, 16, true}}};
        case GgmlType::kQ4_K:  // d, dmin, the 12 scale bytes as three 4-byte units, qs
            return {4, {{0, 2, 2, false}, {2, 2, 2, false}, {4, 12, 4, false}, {16, 128, 16, true}}};
        case GgmlType::kQ5_K:  // Q4_K's, and qh before qs
            return {5,
                    {{0, 2, 2, false}, {2, 2, 2, false}, {4, 12, 4, false}, {16, 32, 16, true}, {48, 128, 16, true}}};
        case GgmlType::kQ6_K:  // d, scales (8-byte chunks: 8 scales of a row pair's each), ql, qh
            return {4, {{208, 2, 2, false}, {192, 16, 8, true}, {0, 128, 16, true}, {128, 64, 16, true}}};
        default:
            return {};
    }
}

// Calls fn(packed_offset, row, row_offset, n) for every run of n bytes that row `row`'s block
// contributes to a packed block (rows 0-7). The gathered segments come first, in order; then
// pair p's part of every interleaved segment, pair after pair, so that a kernel walking pair by
// pair reads the packed block from its start to its end.
template <class Fn>
void for_each_run(const PackedLayout& l, Fn fn) {
    int gathered = 0;
    int pair_bytes = 0;  // one pair's part of the interleaved segments: 2 rows' bytes of each
    for (int s = 0; s < l.nseg; ++s) {
        if (l.seg[s].interleave) {
            pair_bytes += 2 * l.seg[s].bytes;
        } else {
            gathered += kGgufPackRows * l.seg[s].bytes;
        }
    }
    int at_gathered = 0;
    int at_pair = 0;
    for (int s = 0; s < l.nseg; ++s) {
        const Segment& g = l.seg[s];
        const int units = g.bytes / g.unit;
        for (int u = 0; u < units; ++u) {
            for (int r = 0; r < kGgufPackRows; ++r) {
                const int pair = r % 4;
                const int second = r / 4;
                const int dst = g.interleave ? gathered + pair * pair_bytes + at_pair + (2 * u + second) * g.unit
                                             : at_gathered + (u * kGgufPackRows + r) * g.unit;
                fn(dst, r, g.offset + u * g.unit, g.unit);
            }
        }
        if (g.interleave) {
            at_pair += 2 * g.bytes;
        } else {
            at_gathered += kGgufPackRows * g.bytes;
        }
    }
}

size_t group_bytes(GgmlType type, int64_t cols) {
    const GgmlTypeTraits t = ggml_traits(type);
    return static_cast<size_t>(cols / t.block_size) * t.type_size * kGgufPackRows;
}

}  // namespace

bool gguf_has_packed_layout(GgmlType type) { return layout_of(type).nseg > 0; }

bool gguf_packs(GgmlType type) { return gguf_has_packed_layout(type) && gguf_packed_rows(); }

size_t gguf_packed_bytes(GgmlType type, int64_t rows, int64_t cols) {
    MOESERVE_CHECK(gguf_has_packed_layout(type), "no packed layout for {}", ggml_type_name(type));
    const auto groups = static_cast<size_t>((rows + kGgufPackRows - 1) / kGgufPackRows);
    return groups * group_bytes(type, cols);
}

GgufMatrix gguf_pack(ThreadPool& pool, const GgufMatrix& m, uint8_t* dst) {
    MOESERVE_CHECK(m.packed_rows == 1, "matrix already packed");
    const PackedLayout l = layout_of(m.type);
    MOESERVE_CHECK(l.nseg > 0, "no packed layout for {}", ggml_type_name(m.type));
    const GgmlTypeTraits t = ggml_traits(m.type);
    const int64_t nb = m.cols / t.block_size;
    const size_t gbytes = group_bytes(m.type, m.cols);
    const size_t pblock = t.type_size * kGgufPackRows;
    pool.parallel_for((m.rows + kGgufPackRows - 1) / kGgufPackRows, [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
            uint8_t* group = dst + static_cast<size_t>(g) * gbytes;
            for (int64_t b = 0; b < nb; ++b) {
                uint8_t* packed = group + static_cast<size_t>(b) * pblock;
                for_each_run(l, [&](int at, int r, int from, int n) {
                    const int64_t row = g * kGgufPackRows + r;
                    if (row < m.rows) {
                        std::memcpy(packed + at, m.row(row) + static_cast<size_t>(b) * t.type_size + from, n);
                    } else {
                        std::memset(packed + at, 0, n);
                    }
                });
            }
        }
    });
    GgufMatrix p = m;
    p.data = dst;
    p.row_stride = gbytes;
    p.packed_rows = kGgufPackRows;
    return p;
}

void gguf_unpack_row(const GgufMatrix& m, int64_t r, uint8_t* dst) {
    const GgmlTypeTraits t = ggml_traits(m.type);
    const int64_t nb = m.cols / t.block_size;
    if (m.packed_rows == 1) {
        std::memcpy(dst, m.row(r), static_cast<size_t>(nb) * t.type_size);
        return;
    }
    detail::gguf_unpack_group_row(m.type, nb, m.rows_from(r), static_cast<int>(r % kGgufPackRows), dst);
}

namespace detail {

void gguf_unpack_group_row(GgmlType type, int64_t nb, const uint8_t* group, int r, uint8_t* dst) {
    const PackedLayout l = layout_of(type);
    const size_t block = ggml_traits(type).type_size;
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* packed = group + static_cast<size_t>(b) * block * kGgufPackRows;
        uint8_t* out = dst + static_cast<size_t>(b) * block;
        for_each_run(l, [&](int at, int row, int to, int n) {
            if (row == r) std::memcpy(out + to, packed + at, n);
        });
    }
}

namespace {

// A prepared q8_0 block's f32 scale and the sum of its values.
template <class Prepared>
void scale_and_sum(const BlockQ8_0& x, Prepared& y) {
    y.d = load_f16(x.d);
    y.sum = 0;
    for (int i = 0; i < kQK8_0; ++i) y.sum += x.qs[i];
}

}  // namespace

void gguf_prepare_packed_q8(const void* quantized_row, int64_t nb, void* dst) {
    const auto* x = static_cast<const BlockQ8_0*>(quantized_row);
    auto* y = static_cast<GgufPackedQ8Block*>(dst);
    for (int64_t b = 0; b < nb; ++b) {
        scale_and_sum(x[b], y[b]);
        std::memcpy(y[b].qs, x[b].qs, kQK8_0);
    }
}

namespace {

// 32 activation bytes as [0-15 | 0-15 | 16-31 | 16-31].
void twice_per_half(const int8_t* src, int8_t* dst) {
    for (int half = 0; half < 2; ++half) {
        std::memcpy(dst + 32 * half, src + 16 * half, 16);
        std::memcpy(dst + 32 * half + 16, src + 16 * half, 16);
    }
}

}  // namespace

void gguf_prepare_packed_q8x2(const void* quantized_row, int64_t nb, void* dst) {
    const auto* x = static_cast<const BlockQ8_0*>(quantized_row);
    auto* y = static_cast<GgufPackedQ8x2Block*>(dst);
    for (int64_t b = 0; b < nb; ++b) {
        scale_and_sum(x[b], y[b]);
        twice_per_half(x[b].qs, y[b].qs);
    }
}

void gguf_prepare_packed_q8kx2(const void* quantized_row, int64_t nb, void* dst) {
    const auto* x = static_cast<const BlockQ8_K*>(quantized_row);
    auto* y = static_cast<GgufPackedQ8Kx2Block*>(dst);
    for (int64_t b = 0; b < nb; ++b) {
        y[b].d = x[b].d;
        for (int w = 0; w < kQK_K / 32; ++w) twice_per_half(x[b].qs + 32 * w, y[b].qs + 64 * w);
        for (int i = 0; i < 32; ++i) y[b].bsums2[i] = x[b].bsums[(i / 16) * 8 + i % 8];
        for (int i = 0; i < 32; ++i) {
            const int j = i % 8;
            y[b].pair_bsums4[i] = static_cast<int16_t>(x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
        }
    }
}

namespace {

template <GgmlType T, int C>
void packed_tile_ref(int64_t nb, int rows, const uint8_t* group, const uint8_t* const* a, float* out, int64_t ldo) {
    const GgmlTypeTraits t = ggml_traits(T);
    auto* row = static_cast<uint8_t*>(thread_scratch(kGgufPackedScratchSlot, nb * static_cast<int64_t>(t.type_size)));
    for (int r = 0; r < rows; ++r) {
        gguf_unpack_group_row(T, nb, group, r, row);
        for (int c = 0; c < C; ++c) out[c * ldo + r] = gguf_vec_dot_ref(T, nb * t.block_size, row, a[c]);
    }
}

template <int C>
GgufPackedTileFn ref_tile_for(GgmlType type) {
    switch (type) {
        case GgmlType::kQ4_0:
            return &packed_tile_ref<GgmlType::kQ4_0, C>;
        case GgmlType::kQ5_0:
            return &packed_tile_ref<GgmlType::kQ5_0, C>;
        case GgmlType::kQ4_1:
            return &packed_tile_ref<GgmlType::kQ4_1, C>;
        case GgmlType::kQ5_1:
            return &packed_tile_ref<GgmlType::kQ5_1, C>;
        case GgmlType::kMXFP4:
            return &packed_tile_ref<GgmlType::kMXFP4, C>;
        case GgmlType::kQ8_0:
            return &packed_tile_ref<GgmlType::kQ8_0, C>;
        case GgmlType::kQ2_K:
            return &packed_tile_ref<GgmlType::kQ2_K, C>;
        case GgmlType::kQ3_K:
            return &packed_tile_ref<GgmlType::kQ3_K, C>;
        case GgmlType::kQ4_K:
            return &packed_tile_ref<GgmlType::kQ4_K, C>;
        case GgmlType::kQ5_K:
            return &packed_tile_ref<GgmlType::kQ5_K, C>;
        case GgmlType::kQ6_K:
            return &packed_tile_ref<GgmlType::kQ6_K, C>;
        default:
            return nullptr;
    }
}

}  // namespace

GgufPackedTileFn gguf_packed_tile_ref(GgmlType type, int cols) {
    return tile_for_cols(cols, [type](auto c) { return ref_tile_for<decltype(c)::value>(type); });
}

}  // namespace detail

}  // namespace moeserve::kernels::cpu
