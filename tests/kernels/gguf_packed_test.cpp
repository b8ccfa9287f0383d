// Packed GGUF matrices (gguf_packed.h): packing loses nothing (every row unpacks to its stored
// blocks, rectangles and partial groups included), and the packed tiles give the scalar
// reference's bits at every ISA level, for 1-4 activation rows and 1-8 valid rows; then
// gguf_linear and gguf_moe_experts over packed matrices equal the reference level's products
// on the stored rows, bit for bit.
#include "moeserve/kernels/cpu/gguf_packed.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/gguf_test_blocks.h"
#include "kernels/kernel_test_util.h"
#include "moeserve/core/thread_pool.h"
#include "moeserve/kernels/cpu/gguf_blocks.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/cpu/gguf_linear.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"
#include "moeserve/kernels/cpu/isa.h"

namespace moeserve::kernels::cpu {
namespace {

const GgmlType kPackedTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1,  GgmlType::kQ5_0, GgmlType::kQ5_1,
                                 GgmlType::kQ8_0, GgmlType::kMXFP4, GgmlType::kQ2_K, GgmlType::kQ3_K,
                                 GgmlType::kQ4_K, GgmlType::kQ5_K,  GgmlType::kQ6_K};

// rows x n weights of `type`, row r's blocks at r * stride (stride >= the row's bytes: a
// column slice of a wider matrix), raw random blocks for even rows, quantized floats for odd.
struct Weights {
    std::vector<uint8_t> bytes;
    GgufMatrix m;
};

Weights make_weights(GgmlType type, int64_t rows, int64_t n, int64_t extra_blocks, std::mt19937& rng) {
    const GgmlTypeTraits t = ggml_traits(type);
    const size_t row_bytes = static_cast<size_t>(n / t.block_size) * t.type_size;
    const size_t stride = row_bytes + static_cast<size_t>(extra_blocks) * t.type_size;
    Weights w;
    w.bytes.assign(stride * static_cast<size_t>(rows), 0xEE);
    for (int64_t r = 0; r < rows; ++r) {
        const std::string row = weight_row(type, n, r % 2 == 0, rng);
        std::memcpy(w.bytes.data() + stride * static_cast<size_t>(r), row.data() + 1, row_bytes);
    }
    w.m = GgufMatrix{type, w.bytes.data(), rows, n, stride};
    return w;
}

std::vector<uint8_t> packed_copy(const GgufMatrix& m, GgufMatrix& packed) {
    std::vector<uint8_t> dst(gguf_packed_bytes(m.type, m.rows, m.cols));
    ThreadPool pool(3);  // the threads' shares of the groups must tile the matrix
    packed = gguf_pack(pool, m, dst.data());
    return dst;
}

int64_t elements(GgmlType type) { return ggml_traits(type).block_size == 256 ? 512 : 96; }

TEST(GgufPackedTest, EveryRowUnpacksToItsStoredBlocks) {
    std::mt19937 rng(7);
    for (const GgmlType type : kPackedTypes) {
        for (const int64_t rows : {1, 7, 8, 9, 20}) {
            SCOPED_TRACE(std::string(ggml_type_name(type)) + " rows=" + std::to_string(rows));
            const Weights w = make_weights(type, rows, elements(type), rows % 3, rng);
            GgufMatrix packed;
            const std::vector<uint8_t> buf = packed_copy(w.m, packed);
            EXPECT_EQ(packed.packed_rows, kGgufPackRows);
            EXPECT_EQ(buf.size() % kGgufPackRows, 0u);
            const GgmlTypeTraits t = ggml_traits(type);
            const size_t row_bytes = static_cast<size_t>(w.m.cols / t.block_size) * t.type_size;
            std::vector<uint8_t> row(row_bytes);
            for (int64_t r = 0; r < rows; ++r) {
                gguf_unpack_row(packed, r, row.data());
                ASSERT_EQ(std::memcmp(row.data(), w.m.row(r), row_bytes), 0) << "row " << r;
            }
        }
    }
}

// Every tile shape of the packed group of w (8 rows) against gguf_vec_dot_ref on its stored rows,
// at every level.
void expect_tiles_give_the_reference_bits(const Weights& w, std::mt19937& rng) {
    const GgmlType type = w.m.type;
    SCOPED_TRACE(ggml_type_name(type));
    const int64_t n = w.m.cols;
    const int64_t nb = n / ggml_traits(type).block_size;
    {
        GgufMatrix packed;
        const std::vector<uint8_t> buf = packed_copy(w.m, packed);
        std::vector<std::vector<uint64_t>> acts;
        for (int c = 0; c < kGgufTileCols; ++c) acts.push_back(activations(type, n, rng));
        float want[kGgufTileCols][kGgufPackRows];
        for (int c = 0; c < kGgufTileCols; ++c) {
            for (int r = 0; r < kGgufPackRows; ++r) want[c][r] = gguf_vec_dot_ref(type, n, w.m.row(r), acts[c].data());
        }
        test::for_each_isa([&](Isa) {
            const GgufTiles tiles(type, kGgufPackRows);
            ASSERT_EQ(tiles.row_step(), kGgufPackRows);
            std::vector<std::vector<uint8_t>> prepared(kGgufTileCols);
            const uint8_t* a[kGgufTileCols];
            for (int c = 0; c < kGgufTileCols; ++c) {
                a[c] = reinterpret_cast<const uint8_t*>(acts[c].data());
                if (const size_t bytes = tiles.prepared_row_bytes(nb)) {
                    prepared[c].resize(bytes);
                    tiles.prepare(acts[c].data(), nb, prepared[c].data());
                    a[c] = prepared[c].data();
                }
            }
            for (int cols = 1; cols <= kGgufTileCols; ++cols) {
                for (int rows = 1; rows <= kGgufPackRows; ++rows) {
                    float out[kGgufTileCols][kGgufPackRows + 1];
                    for (auto& o : out) std::fill(std::begin(o), std::end(o), -7.0f);
                    tiles.run(nb, rows, cols, packed.data, packed.row_stride, a, &out[0][0], kGgufPackRows + 1);
                    for (int c = 0; c < cols; ++c) {
                        for (int r = 0; r < rows; ++r) {
                            ASSERT_EQ(out[c][r], want[c][r])
                                << "cols=" << cols << " rows=" << rows << " c=" << c << " r=" << r;
                        }
                        ASSERT_EQ(out[c][rows], -7.0f) << "wrote past the valid rows";
                    }
                }
            }
        });
    }
}

TEST(GgufPackedTest, TilesGiveTheReferenceBits) {
    std::mt19937 rng(11);
    for (const GgmlType type : kPackedTypes) {
        expect_tiles_give_the_reference_bits(make_weights(type, kGgufPackRows, elements(type), 0, rng), rng);
    }
}

// MXFP4's e8m0 scales at their edges, one per row: the subnormals (e 0, 1: 2^-128, 2^-127), the
// smallest normals, 2^-1 and 2^0, and large ones (2^72, 2^112; larger overflow the products).
TEST(GgufPackedTest, Mxfp4TilesTakeEveryScale) {
    std::mt19937 rng(13);
    const uint8_t edges[kGgufPackRows] = {0, 1, 2, 3, 127, 128, 200, 240};
    Weights w = make_weights(GgmlType::kMXFP4, kGgufPackRows, elements(GgmlType::kMXFP4), 0, rng);
    for (int64_t r = 0; r < kGgufPackRows; ++r) {
        for (int64_t b = 0; b < w.m.cols / kQK4_0; ++b)
            w.bytes[size_t(r) * w.m.row_stride + size_t(b) * sizeof(BlockMXFP4)] = edges[r];
    }
    expect_tiles_give_the_reference_bits(w, rng);
}

// gguf_linear on a packed matrix (rows not a multiple of 8; 1-9 token rows) at every level equals
// the reference level on the stored rows.
TEST(GgufPackedTest, LinearEqualsTheReferenceOnTheStoredRows) {
    std::mt19937 rng(3);
    ThreadPool pool(2);
    for (const GgmlType type : kPackedTypes) {
        SCOPED_TRACE(ggml_type_name(type));
        const int64_t k = elements(type);
        const int64_t n = 21;
        const Weights w = make_weights(type, n, k, 1, rng);
        GgufMatrix packed;
        const std::vector<uint8_t> buf = packed_copy(w.m, packed);
        for (const int64_t tokens : {1, 2, 5, 9}) {
            std::vector<float> x(static_cast<size_t>(tokens * k));
            std::normal_distribution<float> normal(0.0f, 1.0f);
            for (float& v : x) v = normal(rng);
            std::vector<float> want(static_cast<size_t>(tokens * n));
            std::vector<float> got(want.size());
            GgufScratch scratch;
            const Isa prev = active_isa();
            set_active_isa(Isa::kRef);
            gguf_linear(pool, x.data(), tokens, w.m, want.data(), scratch);
            set_active_isa(prev);
            test::for_each_isa([&](Isa) {
                gguf_linear(pool, x.data(), tokens, packed, got.data(), scratch);
                for (size_t i = 0; i < want.size(); ++i)
                    ASSERT_EQ(got[i], want[i]) << "tokens=" << tokens << " i=" << i;
            });
        }
    }
}

// The fused experts over packed gate / up / down equal the reference level on the stored rows.
TEST(GgufPackedTest, ExpertsEqualTheReferenceOnTheStoredRows) {
    std::mt19937 rng(5);
    ThreadPool pool(2);
    const int64_t hidden = 256;
    const int64_t inter = 96;
    const int num_experts = 3;
    const int top_k = 2;
    for (const auto& [gate_type, down_type] :
         {std::pair{GgmlType::kQ4_0, GgmlType::kQ8_0}, std::pair{GgmlType::kQ4_K, GgmlType::kQ5_0},
          std::pair{GgmlType::kQ5_K, GgmlType::kQ8_0}, std::pair{GgmlType::kQ6_K, GgmlType::kQ4_0},
          std::pair{GgmlType::kQ4_1, GgmlType::kQ5_1}, std::pair{GgmlType::kMXFP4, GgmlType::kMXFP4},
          std::pair{GgmlType::kQ2_K, GgmlType::kQ8_0}, std::pair{GgmlType::kQ3_K, GgmlType::kQ4_1}}) {
        SCOPED_TRACE(std::string(ggml_type_name(gate_type)) + "/" + std::string(ggml_type_name(down_type)));
        std::vector<Weights> stored;
        GgufExperts plain{{}, {}, {}, 0, hidden, inter};
        for (int e = 0; e < num_experts; ++e) {
            for (int p = 0; p < 3; ++p) {
                stored.push_back(p < 2 ? make_weights(gate_type, inter, hidden, 0, rng)
                                       : make_weights(down_type, hidden, inter, 0, rng));
            }
        }
        for (int e = 0; e < num_experts; ++e) {
            plain.gate.push_back(stored[static_cast<size_t>(3 * e)].m);
            plain.up.push_back(stored[static_cast<size_t>(3 * e + 1)].m);
            plain.down.push_back(stored[static_cast<size_t>(3 * e + 2)].m);
        }
        GgufExperts packed = plain;
        std::vector<std::vector<uint8_t>> bufs;
        for (auto* v : {&packed.gate, &packed.up, &packed.down}) {
            for (GgufMatrix& m : *v) bufs.push_back(packed_copy(GgufMatrix(m), m));
        }
        const int64_t tokens = 6;
        std::vector<float> x(static_cast<size_t>(tokens * hidden));
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (float& v : x) v = normal(rng);
        std::vector<int32_t> ids(static_cast<size_t>(tokens * top_k));
        std::vector<float> weights(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
            ids[i] = static_cast<int32_t>((i / top_k + i % top_k) % num_experts);
            weights[i] = 0.25f + 0.5f * static_cast<float>(i % top_k);
        }
        std::vector<float> want(static_cast<size_t>(tokens * hidden));
        std::vector<float> got(want.size());
        GgufScratch scratch;
        const Isa prev = active_isa();
        set_active_isa(Isa::kRef);
        gguf_moe_experts(pool, x.data(), tokens, ids.data(), weights.data(), top_k, plain, scratch, want.data());
        set_active_isa(prev);
        test::for_each_isa([&](Isa) {
            for (const int64_t t : {int64_t{1}, tokens}) {
                gguf_moe_experts(pool, x.data(), t, ids.data(), weights.data(), top_k, packed, scratch, got.data());
                for (int64_t i = 0; i < t * hidden; ++i) {
                    ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)])
                        << "tokens=" << t << " i=" << i;
                }
            }
        });
    }
}

TEST(GgufPackedTest, TypesWithoutALayoutAreNotPacked) {
    for (const GgmlType type : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kF8E4M3x128}) {
        EXPECT_FALSE(gguf_has_packed_layout(type)) << ggml_type_name(type);
        EXPECT_FALSE(gguf_packs(type)) << ggml_type_name(type);
    }
    for (const GgmlType type : kPackedTypes) EXPECT_TRUE(gguf_has_packed_layout(type)) << ggml_type_name(type);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
