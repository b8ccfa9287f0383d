// paged_attention (and paged_attention_ref) vs a dense causal attention computed without paging:
// KV written through write_kv into shuffled blocks, a batch mixing decode, full prefill and
// chunked prefill (q_len > 1 with earlier context), GQA, block sizes 1/16/128, head dims 64/128,
// contexts past 16K keys;
// an f32, a bf16 and an fp8 cache (the bf16 / fp8 ones against the dense attention of the K/V the
// cache holds, read back through their rounding / codes and scales, at every ISA level the
// process can set).
#include "moeserve/kernels/cpu/paged_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kernel_test_util.h"
#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/isa.h"

namespace moeserve::kernels::cpu {
namespace {

struct Seq {
    int32_t seq_len, q_len;
};

// Decode, a whole prefill, chunks after a cached prefix.
const std::vector<Seq> kMixedBatch = {{1, 1}, {37, 1}, {50, 50}, {70, 13}, {300, 1}, {129, 2}};

// gpt-oss's attention options: a sliding window (0: none) and per-head sinks.
struct Options {
    int64_t window = 0;
    bool sinks = false;
};

void check(int64_t block_size, int64_t head_dim, int64_t num_heads, int64_t num_kv_heads, int threads,
           DType dtype = DType::kF32, const std::vector<Seq>& seqs = kMixedBatch, Options opt = {}) {
    SCOPED_TRACE(testing::Message() << "bs=" << block_size << " d=" << head_dim << " heads=" << num_heads << "/"
                                    << num_kv_heads << " threads=" << threads << " " << dtype_name(dtype)
                                    << " window=" << opt.window << " sinks=" << opt.sinks);
    std::mt19937 rng(uint32_t(block_size * 1000 + head_dim + threads));
    const int64_t ns = int64_t(seqs.size()), row = num_kv_heads * head_dim;
    int64_t max_blocks = 0, total_blocks = 1;  // block 0 is the null block
    for (const Seq& s : seqs) {
        const int64_t nb = (s.seq_len + block_size - 1) / block_size;
        max_blocks = std::max(max_blocks, nb);
        total_blocks += nb;
    }
    std::vector<int32_t> ids(size_t(total_blocks - 1));
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> tables(size_t(ns * max_blocks), 0);
    size_t next_id = 0;
    for (int64_t s = 0; s < ns; ++s) {
        const int64_t nb = (seqs[size_t(s)].seq_len + block_size - 1) / block_size;
        for (int64_t b = 0; b < nb; ++b) tables[size_t(s * max_blocks + b)] = ids[next_id++];
    }
    const size_t cache_elems = size_t(total_blocks * block_size * row);
    std::vector<float> kc(cache_elems, NAN), vc(cache_elems, NAN);
    std::vector<uint16_t> kh(cache_elems, 0x7fc0), vh(cache_elems, 0x7fc0);  // bf16 NaN
    std::vector<uint8_t> k8(cache_elems, 0x7f), v8(cache_elems, 0x7f);       // e4m3 NaN
    std::vector<float> ks(cache_elems / size_t(head_dim), NAN), vs(ks.size(), NAN);
    PagedKvLayer kv{kc.data(), vc.data(), total_blocks, block_size, num_kv_heads, head_dim};
    if (dtype == DType::kBF16) {
        kv = PagedKvLayer{kh.data(), vh.data(), total_blocks, block_size, num_kv_heads, head_dim, DType::kBF16};
    } else if (dtype == DType::kF8E4M3) {
        kv = PagedKvLayer{k8.data(), v8.data(),      total_blocks, block_size, num_kv_heads,
                          head_dim,  DType::kF8E4M3, ks.data(),    vs.data()};
    }

    // Dense K/V per sequence, written through write_kv (with a padding slot -1 in between).
    std::vector<std::vector<float>> dk(static_cast<size_t>(ns)), dv(static_cast<size_t>(ns));
    for (int64_t s = 0; s < ns; ++s) {
        const int64_t len = seqs[size_t(s)].seq_len;
        dk[size_t(s)].resize(size_t((len + 1) * row));
        dv[size_t(s)].resize(dk[size_t(s)].size());
        test::fill_uniform(dk[size_t(s)].data(), (len + 1) * row, rng, -2.0f, 2.0f);
        test::fill_uniform(dv[size_t(s)].data(), (len + 1) * row, rng);
        std::vector<int64_t> slots(size_t(len + 1));
        for (int64_t p = 0; p < len; ++p) {
            slots[size_t(p)] = int64_t{tables[size_t(s * max_blocks + p / block_size)]} * block_size + p % block_size;
        }
        slots[size_t(len)] = -1;
        write_kv(kv, dk[size_t(s)].data(), dv[size_t(s)].data(), len + 1, slots.data());
        if (dtype == DType::kBF16) {  // the reference attends over what a bf16 cache holds
            for (auto& x : dk[size_t(s)]) x = bf16_to_f32(f32_to_bf16(x));
            for (auto& x : dv[size_t(s)]) x = bf16_to_f32(f32_to_bf16(x));
        }
        if (dtype == DType::kF8E4M3) {  // ... and over the codes times the scales of an fp8 one
            for (int64_t p = 0; p < len; ++p) {
                for (int64_t i = 0; i < row; ++i) {
                    const auto c = size_t(slots[size_t(p)] * row + i), sc = c / size_t(head_dim);
                    dk[size_t(s)][size_t(p * row + i)] = f8e4m3_to_f32(k8[c]) * ks[sc];
                    dv[size_t(s)][size_t(p * row + i)] = f8e4m3_to_f32(v8[c]) * vs[sc];
                }
            }
        }
    }

    std::vector<int32_t> qstart(size_t(ns + 1), 0), lens(static_cast<size_t>(ns));
    for (int64_t s = 0; s < ns; ++s) {
        qstart[size_t(s + 1)] = qstart[size_t(s)] + seqs[size_t(s)].q_len;
        lens[size_t(s)] = seqs[size_t(s)].seq_len;
    }
    const int64_t tokens = qstart.back(), qsize = tokens * num_heads * head_dim;
    test::Floats q(qsize), out(qsize), out_ref(qsize), dense(qsize);
    const int64_t lsize = tokens * num_heads;
    test::Floats lse(lsize), lse_ref(lsize), lse_dense(lsize);
    test::fill_uniform(q.data(), qsize, rng, -2.0f, 2.0f);
    const float scale = 1.0f / std::sqrt(float(head_dim));
    std::vector<float> sinks(static_cast<size_t>(num_heads));
    test::fill_uniform(sinks.data(), num_heads, rng, -1.0f, 3.0f);

    // Dense reference.
    const int64_t group = num_heads / num_kv_heads;
    for (int64_t s = 0; s < ns; ++s) {
        const Seq& sq = seqs[size_t(s)];
        for (int64_t i = 0; i < sq.q_len; ++i) {
            const int64_t pos = sq.seq_len - sq.q_len + i, tok = qstart[size_t(s)] + i;
            for (int64_t h = 0; h < num_heads; ++h) {
                const float* qv = q.data() + (tok * num_heads + h) * head_dim;
                const int64_t first = opt.window > 0 ? std::max<int64_t>(0, pos - opt.window + 1) : 0;
                std::vector<double> p(size_t(pos + 1), 0.0);
                double mx = -INFINITY, sum = 0;
                for (int64_t j = first; j <= pos; ++j) {
                    const float* kr = dk[size_t(s)].data() + j * row + (h / group) * head_dim;
                    double dot = 0;
                    for (int64_t x = 0; x < head_dim; ++x) dot += double(qv[x]) * kr[x];
                    mx = std::max(mx, p[size_t(j)] = dot * scale);
                }
                for (int64_t j = first; j <= pos; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - mx);
                if (opt.sinks) sum += std::exp(double(sinks[size_t(h)]) - mx);
                lse_dense[tok * num_heads + h] = float(mx + std::log(sum));
                for (int64_t x = 0; x < head_dim; ++x) {
                    double acc = 0;
                    for (int64_t j = first; j <= pos; ++j) {
                        acc += p[size_t(j)] * dv[size_t(s)][size_t(j * row + (h / group) * head_dim + x)];
                    }
                    dense[(tok * num_heads + h) * head_dim + x] = float(acc / sum);
                }
            }
        }
    }
    PagedAttentionArgs args{q.data(),      out.data(),  tokens,        num_heads,  ns,
                            qstart.data(), lens.data(), tables.data(), max_blocks, scale};
    args.lse = lse.data();
    args.window = opt.window;
    args.sinks = opt.sinks ? sinks.data() : nullptr;
    ThreadPool pool(threads);
    paged_attention(pool, kv, args);
    test::expect_close(out.data(), dense.data(), qsize, 2e-5f, "paged_attention");
    test::expect_close(lse.data(), lse_dense.data(), lsize, 2e-6f, "paged_attention lse");
    args.out = out_ref.data();
    args.lse = lse_ref.data();
    paged_attention_ref(kv, args);
    test::expect_close(out_ref.data(), dense.data(), qsize, 1e-6f, "paged_attention_ref");
    test::expect_close(lse_ref.data(), lse_dense.data(), lsize, 1e-6f, "paged_attention_ref lse");
}

TEST(PagedAttentionTest, MatchesDenseAttention) {
    for (int threads : {1, 2, 3}) {
        check(16, 128, 4, 2, threads);  // GQA group 2
        check(128, 64, 2, 2, threads);  // MHA, one big block
        check(1, 64, 4, 1, threads);    // block size 1, MQA
    }
    check(16, 100, 3, 1, 2);  // head_dim not a multiple of 8
}

TEST(PagedAttentionTest, Bf16CacheMatchesDenseAttentionOfRoundedKv) {
    test::for_each_isa([&](Isa) {
        check(16, 128, 4, 2, 2, DType::kBF16);
        check(1, 64, 4, 1, 3, DType::kBF16);
        check(16, 100, 3, 1, 1, DType::kBF16);  // scalar tails
        check(5, 48, 4, 2, 2, DType::kBF16);    // AVX-512 decode: 16 elements past the last 32
    });
}

// An fp8 cache, odd shapes: head_dim, sequence lengths and block counts that are not multiples
// of 8 (vector tails of the widening and of the key tiles).
TEST(PagedAttentionTest, Fp8CacheMatchesDenseAttentionOfDequantizedKv) {
    test::for_each_isa([&](Isa) {
        check(16, 128, 4, 2, 2, DType::kF8E4M3);
        check(1, 64, 4, 1, 3, DType::kF8E4M3);
        check(16, 100, 3, 1, 1, DType::kF8E4M3);
        check(5, 37, 6, 3, 2, DType::kF8E4M3);
        check(7, 13, 2, 2, 1, DType::kF8E4M3);
    });
}

// gpt-oss's attention: sliding windows (shorter and longer than the sequences, not a multiple of
// a key tile, a window of 1) and per-head sinks, alone and together, every cache dtype and ISA level.
TEST(PagedAttentionTest, SlidingWindowsAndSinksMatchDenseAttention) {
    const std::vector<Seq> seqs = {{1, 1}, {37, 1}, {50, 50}, {70, 13}, {300, 1}, {129, 2}, {600, 40}};
    test::for_each_isa([&](Isa) {
        for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
            check(16, 64, 4, 2, 2, dtype, seqs, {.window = 45, .sinks = true});
            check(16, 64, 4, 2, 2, dtype, seqs, {.window = 128});
            check(5, 64, 4, 1, 3, dtype, seqs, {.sinks = true});
        }
        check(16, 100, 3, 1, 1, DType::kBF16, seqs, {.window = 1, .sinks = true});
        check(1, 64, 2, 2, 2, DType::kF32, seqs, {.window = 1000});
    });
}

// Long contexts (> 16K keys): a chunk of 17 queries (an item of 16 tokens and a ragged one) at the
// end of a 16500-token sequence and a decode token at 16390, plus a chunk of 17 that starts on a
// key tile boundary (416), with every cache dtype; the bf16 cache (the serving default) at every
// ISA level (avx512 runs paged_attention_avx512.cpp), the others at the process's level.
TEST(PagedAttentionTest, LongContextsMatchDenseAttention) {
    const std::vector<Seq> seqs = {{16500, 17}, {16390, 1}, {416, 17}};
    test::for_each_isa([&](Isa) { check(16, 64, 4, 2, 2, DType::kBF16, seqs); });
    // A window far shorter than the context: the AVX-512 kernels read only its segments.
    test::for_each_isa([&](Isa) { check(16, 64, 4, 2, 2, DType::kBF16, seqs, {.window = 128, .sinks = true}); });
    check(16, 64, 2, 1, 2, DType::kF32, seqs);
    check(32, 48, 2, 2, 2, DType::kF8E4M3, seqs);
}

// A query's output has the same bits whether it is decoded alone or is one row of a prefill
// chunk (the engine's batched-equals-alone guarantee rests on it): 20 tokens attended as one chunk
// (an item of 16 tokens and one of 4, whose rows take different AVX-512 kernels), then each of the
// 20 alone at its own sequence length (alone, a decode is split by key segments across the
// threads), for each cache dtype and ISA level; at 300 keys (one segment) and at 524, where the
// chunk straddles the segment boundary at 512.
// With a sliding window, the AVX-512 kernels skip the tiles and segments before every row's window:
// skipped, they must leave the same bits as read. (The AVX2 group kernel starts its tiles at each
// group's window, so there a row's bits depend on its group: checked at the avx512 level only.)
void expect_same_bits_alone_and_in_a_chunk(int64_t len, int64_t window = 0, int64_t d = 64) {
    constexpr int64_t kBs = 16, kHeads = 4, kKvHeads = 2, kChunkLen = 20;
    const int64_t row = kKvHeads * d;
    SCOPED_TRACE(testing::Message() << "keys " << len << " window " << window << " head_dim " << d);
    const int64_t blocks = len / kBs + 2;
    std::mt19937 rng(5);
    std::vector<float> k(size_t(len * row)), v(k.size());
    test::fill_uniform(k.data(), len * row, rng, -2.0f, 2.0f);
    test::fill_uniform(v.data(), len * row, rng);
    test::Floats q(kChunkLen * kHeads * d), chunk_out(kChunkLen * kHeads * d), alone_out(kHeads * d);
    test::fill_uniform(q.data(), kChunkLen * kHeads * d, rng, -2.0f, 2.0f);
    std::vector<int32_t> table(size_t(blocks - 1));
    std::iota(table.begin(), table.end(), 1);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<int64_t> slots(static_cast<size_t>(len));
    for (int64_t p = 0; p < len; ++p) slots[size_t(p)] = int64_t{table[size_t(p / kBs)]} * kBs + p % kBs;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
        SCOPED_TRACE(dtype_name(dtype));
        const size_t elems = size_t(blocks * kBs * row);
        std::vector<std::byte> kc(elems * 4), vc(elems * 4);
        std::vector<float> ks(elems / d), vs(elems / d);
        PagedKvLayer kv{kc.data(), vc.data(), blocks, kBs, kKvHeads, d, dtype, ks.data(), vs.data()};
        write_kv(kv, k.data(), v.data(), len, slots.data());
        test::for_each_isa([&](Isa isa) {
            if (window > 0 && isa < Isa::kAvx512) return;
            ThreadPool pool(2);
            const int32_t chunk_start[2] = {0, int32_t(kChunkLen)}, chunk_len = int32_t(len);
            PagedAttentionArgs chunk{q.data(),    chunk_out.data(), kChunkLen,    kHeads,     1,
                                     chunk_start, &chunk_len,       table.data(), blocks - 1, 0.125f};
            chunk.window = window;
            paged_attention(pool, kv, chunk);
            for (int64_t i = 0; i < kChunkLen; ++i) {
                const int32_t start[2] = {0, 1}, alone_len = int32_t(len - kChunkLen + i + 1);
                PagedAttentionArgs alone{q.data() + i * kHeads * d,
                                         alone_out.data(),
                                         1,
                                         kHeads,
                                         1,
                                         start,
                                         &alone_len,
                                         table.data(),
                                         blocks - 1,
                                         0.125f};
                alone.window = window;
                paged_attention(pool, kv, alone);
                for (int64_t x = 0; x < kHeads * d; ++x) {
                    ASSERT_EQ(alone_out[x], chunk_out[i * kHeads * d + x]) << "query " << i << " element " << x;
                }
            }
        });
    }
}

TEST(PagedAttentionTest, AQueryHasTheSameBitsAloneAndInAChunk) {
    for (int64_t len : {300, 524}) expect_same_bits_alone_and_in_a_chunk(len);
    expect_same_bits_alone_and_in_a_chunk(300, 0, 48);  // the decode kernel's bf16 K pairs: a half group
}

// Windows of 1 key, of fewer keys than the chunk, and of more, whose starts fall before and after
// the segment boundary at 256 for the chunk's rows (keys 504-523).
TEST(PagedAttentionTest, AWindowedQueryHasTheSameBitsAloneAndInAChunk) {
    for (int64_t window : {1, 45, 128, 270, 300}) expect_same_bits_alone_and_in_a_chunk(524, window);
}

// write_kv rounds to nearest even into a bf16 cache, skips negative slots.
TEST(PagedAttentionTest, WriteKvRoundsToBf16) {
    std::vector<uint16_t> k(2 * 8, 0), v(2 * 8, 0);
    const PagedKvLayer kv{k.data(), v.data(), 2, 1, 1, 8, DType::kBF16};
    std::vector<float> src(16);
    for (int i = 0; i < 16; ++i) src[size_t(i)] = 1.0f + float(i) * 0.001f;
    const int64_t slots[2] = {1, -1};
    write_kv(kv, src.data(), src.data() + 8, 2, slots);
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(k[size_t(8 + i)], f32_to_bf16(src[size_t(i)]));
        EXPECT_EQ(v[size_t(8 + i)], f32_to_bf16(src[size_t(8 + i)]));
        EXPECT_EQ(k[size_t(i)], 0);  // slot 0 untouched
    }
}

}  // namespace
}  // namespace moeserve::kernels::cpu
