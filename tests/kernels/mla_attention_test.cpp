// MLA kernels: mla_attention (AVX2) vs its scalar reference over several sequences, block
// tables out of order and head counts that do not fill a head group, over f32, bf16 and fp8
// latent caches; mla_absorb_q / mla_expand_v vs their references (bf16 and f32 weights); and the
// absorbed pipeline vs the expanded attention (per-head K = [W_UK latent, k_pe], V = W_UV
// latent) computed in double.
#include "moeserve/kernels/cpu/mla_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/isa.h"

namespace moeserve::kernels::cpu {
namespace {

struct Case {
    int64_t heads, rank, rope, block_size;
};

// Two sequences: A decodes 1 token at position 40, B prefills 6 tokens at positions 3..8.
struct Batch {
    std::vector<int32_t> query_start{0, 1, 7}, seq_lens{41, 9};
    std::vector<int32_t> tables;
    int64_t max_blocks = 0;
    int64_t num_tokens() const { return query_start.back(); }
};

Batch make_batch(int64_t block_size, int64_t num_blocks) {
    Batch b;
    b.max_blocks = (41 + block_size - 1) / block_size;
    // A takes blocks from the top down, B from 1 upwards: interleaved, out of order.
    for (int64_t i = 0; i < b.max_blocks; ++i) b.tables.push_back(static_cast<int32_t>(num_blocks - 1 - i));
    for (int64_t i = 0; i < b.max_blocks; ++i)
        b.tables.push_back(static_cast<int32_t>(i < 9 / block_size + 1 ? 1 + i : 0));
    return b;
}

// read_latent of sequence A's positions [3, 41) through its table equals `expected` f32 [slots,
// row] at each position's slot, exactly.
void expect_read_latent_exact(const PagedLatentLayer& kv, const Batch& b, const float* expected) {
    const int64_t row = kv.kv_lora_rank + kv.rope_dim;
    test::Floats back((41 - 3) * row);
    read_latent(kv, b.tables.data(), 3, 41, back.data());
    for (int64_t j = 3; j < 41; ++j) {
        const int64_t slot = int64_t{b.tables[size_t(j / kv.block_size)]} * kv.block_size + j % kv.block_size;
        for (int64_t x = 0; x < row; ++x) ASSERT_EQ(back[(j - 3) * row + x], expected[slot * row + x]);
    }
}

TEST(MlaAttentionTest, MatchesReference) {
    std::mt19937 rng(3);
    for (const Case& c : {Case{4, 32, 16, 16}, Case{16, 256, 32, 16}, Case{3, 20, 6, 5}, Case{9, 64, 8, 1}}) {
        const int64_t num_blocks = 2 * ((41 + c.block_size - 1) / c.block_size) + 2;
        const Batch b = make_batch(c.block_size, num_blocks);
        const int64_t row = c.rank + c.rope, t = b.num_tokens();
        test::Floats cache(num_blocks * c.block_size * row), q(t * c.heads * row);
        test::fill_uniform(cache.data(), num_blocks * c.block_size * row, rng);
        test::fill_uniform(q.data(), t * c.heads * row, rng, -0.5f, 0.5f);
        const PagedLatentLayer kv{cache.data(), num_blocks, c.block_size, c.rank, c.rope};
        test::Floats out(t * c.heads * c.rank), ref(t * c.heads * c.rank);
        MlaAttentionArgs args{q.data(),        out.data(),   t,   c.heads, 2, b.query_start.data(), b.seq_lens.data(),
                              b.tables.data(), b.max_blocks, 0.3f};
        for (int threads : {1, 2}) {
            ThreadPool pool(threads);
            mla_attention(pool, kv, args);
            args.out = ref.data();
            mla_attention_ref(kv, args);
            args.out = out.data();
            test::expect_close(out.data(), ref.data(), t * c.heads * c.rank, 2e-6f, "mla_attention");
        }
    }
}

// Long contexts, split by segments of 256 keys across the threads (where the (token, head group)
// items are fewer than the threads) and merged: a decode token after
// 1299 keys, a chunk of 3 tokens at positions 700-702 (after a segment boundary at 512) and 2
// tokens of a short sequence beside them (one item each), causal and not, with the lse; 9 heads
// (the AVX2 kernel's groups of 8, the second partial) and 17 (at the avx512 level the AVX-512
// kernel's groups of 16, the second with one head).
void expect_long_contexts_match_reference(int64_t kHeadsN) {
    SCOPED_TRACE(testing::Message() << kHeadsN << " heads");
    constexpr int64_t kRank = 64, kRope = 16, kBs = 16, kRow = kRank + kRope;
    const std::vector<int32_t> query_start{0, 1, 4, 6}, seq_lens{1300, 703, 40};
    int64_t max_blocks = 0, num_blocks = 1;
    for (int32_t len : seq_lens) {
        max_blocks = std::max(max_blocks, (int64_t{len} + kBs - 1) / kBs);
        num_blocks += (len + kBs - 1) / kBs;
    }
    std::vector<int32_t> tables(size_t(3 * max_blocks), 0);
    int32_t next_block = int32_t(num_blocks - 1);  // from the top down: out of order
    for (size_t s = 0; s < 3; ++s) {
        for (int64_t b = 0; b < (seq_lens[s] + kBs - 1) / kBs; ++b)
            tables[s * size_t(max_blocks) + size_t(b)] = next_block--;
    }
    std::mt19937 rng(11);
    test::Floats cache(num_blocks * kBs * kRow), q(6 * kHeadsN * kRow);
    test::fill_uniform(cache.data(), num_blocks * kBs * kRow, rng);
    test::fill_uniform(q.data(), 6 * kHeadsN * kRow, rng, -0.5f, 0.5f);
    const PagedLatentLayer kv{cache.data(), num_blocks, kBs, kRank, kRope};
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "not causal");
        test::Floats out(6 * kHeadsN * kRank), ref(6 * kHeadsN * kRank), lse(6 * kHeadsN), lse_ref(6 * kHeadsN);
        MlaAttentionArgs args{q.data(),        out.data(),    6,          kHeadsN, 3, query_start.data(),
                              seq_lens.data(), tables.data(), max_blocks, 0.3f};
        args.causal = causal;
        args.lse = lse_ref.data();
        args.out = ref.data();
        mla_attention_ref(kv, args);
        for (int threads : {1, 3, 16}) {  // 16: more threads than the 12 (token, group) items, so split
            ThreadPool pool(threads);
            args.out = out.data();
            args.lse = lse.data();
            mla_attention(pool, kv, args);
            test::expect_close(out.data(), ref.data(), 6 * kHeadsN * kRank, 2e-6f, "mla_attention");
            test::expect_close(lse.data(), lse_ref.data(), 6 * kHeadsN, 2e-6f, "mla_attention lse");
        }
    }
}

TEST(MlaAttentionTest, LongContextsSplitBySegmentsMatchReference) {
    test::for_each_isa([&](Isa) {
        for (int64_t heads : {9, 17}) expect_long_contexts_match_reference(heads);
    });
}

// A bf16 latent cache: mla_attention (every ISA level) and mla_attention_ref over it equal the
// reference over an f32 cache holding the same bf16-rounded rows; read_latent widens exactly.
TEST(MlaAttentionTest, Bf16CacheMatchesReferenceOfRoundedRows) {
    std::mt19937 rng(4);
    for (const Case& c : {Case{4, 32, 16, 16}, Case{3, 20, 6, 5}, Case{16, 512, 64, 16}}) {
        const int64_t num_blocks = 2 * ((41 + c.block_size - 1) / c.block_size) + 2;
        const Batch b = make_batch(c.block_size, num_blocks);
        const int64_t row = c.rank + c.rope, t = b.num_tokens(), n = num_blocks * c.block_size;
        test::Floats rows(n * row), rounded(n * row), q(t * c.heads * row);
        test::fill_uniform(rows.data(), n * row, rng);
        test::fill_uniform(q.data(), t * c.heads * row, rng, -0.5f, 0.5f);
        std::vector<uint16_t> cache(size_t(n * row), 0);
        const PagedLatentLayer kv{cache.data(), num_blocks, c.block_size, c.rank, c.rope, DType::kBF16};
        std::vector<int64_t> slots(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) slots[size_t(i)] = i;
        write_latent(kv, rows.data(), n, slots.data());
        for (int64_t i = 0; i < n * row; ++i) rounded[i] = bf16_to_f32(f32_to_bf16(rows[i]));
        const PagedLatentLayer kv32{rounded.data(), num_blocks, c.block_size, c.rank, c.rope};
        expect_read_latent_exact(kv, b, rounded.data());
        test::Floats out(t * c.heads * c.rank), ref(t * c.heads * c.rank), ref16(t * c.heads * c.rank);
        MlaAttentionArgs args{q.data(),        ref.data(),   t,   c.heads, 2, b.query_start.data(), b.seq_lens.data(),
                              b.tables.data(), b.max_blocks, 0.3f};
        mla_attention_ref(kv32, args);
        args.out = ref16.data();
        mla_attention_ref(kv, args);
        test::expect_close(ref16.data(), ref.data(), t * c.heads * c.rank, 1e-6f, "mla_attention_ref bf16");
        args.out = out.data();
        test::for_each_isa([&](Isa isa) {
            ThreadPool pool(2);
            mla_attention(pool, kv, args);
            test::expect_close(out.data(), ref.data(), t * c.heads * c.rank, 2e-6f, isa_name(isa));
        });
    }
}

// An fp8 latent cache (the latent and k_pe with scales of their own; k_pe 16x larger here, as an
// unnormalized rope key can be): read_latent returns code * scale exactly, and mla_attention (every
// ISA level) and mla_attention_ref over it equal the reference over an f32 cache of those
// dequantized rows, causal or not, with lse; odd ranks, rope dims and block sizes (vector tails).
TEST(MlaAttentionTest, Fp8CacheMatchesReferenceOfDequantizedRows) {
    std::mt19937 rng(7);
    for (const Case& c : {Case{4, 32, 16, 16}, Case{3, 20, 6, 5}, Case{5, 37, 11, 3}, Case{16, 512, 64, 16}}) {
        SCOPED_TRACE(testing::Message() << "rank=" << c.rank << " rope=" << c.rope << " bs=" << c.block_size);
        const int64_t num_blocks = 2 * ((41 + c.block_size - 1) / c.block_size) + 2;
        const Batch b = make_batch(c.block_size, num_blocks);
        const int64_t row = c.rank + c.rope, t = b.num_tokens(), n = num_blocks * c.block_size;
        test::Floats rows(n * row), deq(n * row), q(t * c.heads * row);
        test::fill_uniform(rows.data(), n * row, rng);
        for (int64_t i = 0; i < n; ++i) {
            for (int64_t x = c.rank; x < row; ++x) rows[i * row + x] *= 16.0f;
        }
        test::fill_uniform(q.data(), t * c.heads * row, rng, -0.5f, 0.5f);
        std::vector<uint8_t> cache(size_t(n * row), 0x7f);  // e4m3 NaN
        std::vector<float> scales(size_t(n * 2), NAN);
        const PagedLatentLayer kv{cache.data(), num_blocks,     c.block_size, c.rank,
                                  c.rope,       DType::kF8E4M3, scales.data()};
        std::vector<int64_t> slots(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) slots[size_t(i)] = i;
        write_latent(kv, rows.data(), n, slots.data());
        for (int64_t i = 0; i < n; ++i) {
            for (int64_t x = 0; x < row; ++x) {
                const float sc = scales[size_t(2 * i + (x < c.rank ? 0 : 1))];
                deq[i * row + x] = f8e4m3_to_f32(cache[size_t(i * row + x)]) * sc;
            }
        }
        const PagedLatentLayer kv32{deq.data(), num_blocks, c.block_size, c.rank, c.rope};
        expect_read_latent_exact(kv, b, deq.data());
        for (bool causal : {true, false}) {
            SCOPED_TRACE(causal ? "causal" : "non-causal");
            const int64_t no = t * c.heads * c.rank, nl = t * c.heads;
            test::Floats out(no), ref(no), ref8(no), lse(nl), lse_ref(nl), lse_ref8(nl);
            MlaAttentionArgs args{
                q.data(),        ref.data(),   t,   c.heads, 2, b.query_start.data(), b.seq_lens.data(),
                b.tables.data(), b.max_blocks, 0.3f};
            args.causal = causal;
            args.lse = lse_ref.data();
            mla_attention_ref(kv32, args);
            args.out = ref8.data();
            args.lse = lse_ref8.data();
            mla_attention_ref(kv, args);
            test::expect_close(ref8.data(), ref.data(), no, 1e-6f, "mla_attention_ref fp8");
            test::expect_close(lse_ref8.data(), lse_ref.data(), nl, 1e-6f, "mla_attention_ref fp8 lse");
            args.out = out.data();
            args.lse = lse.data();
            test::for_each_isa([&](Isa isa) {
                ThreadPool pool(2);
                mla_attention(pool, kv, args);
                test::expect_close(out.data(), ref.data(), no, 2e-6f, isa_name(isa));
                test::expect_close(lse.data(), lse_ref.data(), nl, 2e-6f, isa_name(isa));
            });
        }
    }
}

// causal = false: every query attends all seq_lens[s] rows; lse as the reference computes it.
TEST(MlaAttentionTest, NonCausalWithLseMatchesReference) {
    std::mt19937 rng(6);
    for (const Case& c : {Case{4, 32, 16, 16}, Case{9, 64, 8, 1}}) {
        const int64_t num_blocks = 2 * ((41 + c.block_size - 1) / c.block_size) + 2;
        const Batch b = make_batch(c.block_size, num_blocks);
        const int64_t row = c.rank + c.rope, t = b.num_tokens();
        test::Floats cache(num_blocks * c.block_size * row), q(t * c.heads * row);
        test::fill_uniform(cache.data(), num_blocks * c.block_size * row, rng);
        test::fill_uniform(q.data(), t * c.heads * row, rng, -0.5f, 0.5f);
        const PagedLatentLayer kv{cache.data(), num_blocks, c.block_size, c.rank, c.rope};
        test::Floats out(t * c.heads * c.rank), ref(t * c.heads * c.rank), lse(t * c.heads), lse_ref(t * c.heads);
        MlaAttentionArgs args{q.data(),        out.data(),   t,   c.heads, 2, b.query_start.data(), b.seq_lens.data(),
                              b.tables.data(), b.max_blocks, 0.3f};
        args.causal = false;
        args.lse = lse.data();
        ThreadPool pool(2);
        mla_attention(pool, kv, args);
        args.out = ref.data();
        args.lse = lse_ref.data();
        mla_attention_ref(kv, args);
        test::expect_close(out.data(), ref.data(), t * c.heads * c.rank, 2e-6f, "mla_attention non-causal");
        test::expect_close(lse.data(), lse_ref.data(), t * c.heads, 2e-6f, "mla_attention lse");
        // The last query of B (position 8: all 9 rows) is the same causal or not.
        args.causal = true;
        test::Floats causal(t * c.heads * c.rank);
        args.out = causal.data();
        args.lse = nullptr;
        mla_attention_ref(kv, args);
        test::expect_close(causal.data() + (t - 1) * c.heads * c.rank, ref.data() + (t - 1) * c.heads * c.rank,
                           c.heads * c.rank, 1e-6f, "last query: causal == non-causal");
    }
}

TEST(MlaAttentionTest, WriteLatentSkipsPadding) {
    std::vector<float> cache(4 * 2 * 3, -1.0f);
    const PagedLatentLayer kv{cache.data(), 4, 2, 2, 1};
    const std::vector<float> rows = {1, 2, 3, 4, 5, 6};
    const std::vector<int64_t> slots = {5, -1};
    write_latent(kv, rows.data(), 2, slots.data());
    for (int64_t i = 0; i < 24; ++i) {
        const float want = i >= 15 && i < 18 ? float(i - 14) : -1.0f;
        EXPECT_EQ(cache[size_t(i)], want) << i;
    }
}

TEST(MlaAttentionTest, AbsorbAndExpandMatchReference) {
    std::mt19937 rng(5);
    for (const auto& [heads, nope, v, rank] :
         {std::tuple{4, 32, 32, 32}, std::tuple{16, 64, 64, 256}, std::tuple{3, 12, 20, 44}}) {
        const int64_t t = 5, w_n = heads * (nope + v) * rank;
        const auto w16 = test::random_bf16(w_n, rng, 0.2f);
        std::vector<float> w32(static_cast<size_t>(w_n));
        test::fill_uniform(w32.data(), w_n, rng, -0.2f, 0.2f);
        // q rows as the model holds them: [T, H, nope + rope] with rope = 8 unused values
        const int64_t qs = nope + 8;
        test::Floats q(t * heads * qs), lat(t * heads * rank);
        test::fill_uniform(q.data(), t * heads * qs, rng);
        test::fill_uniform(lat.data(), t * heads * rank, rng);
        for (bool bf16 : {true, false}) {
            const MlaKvB w{bf16 ? w16.data() : nullptr, bf16 ? nullptr : w32.data(), heads, nope, v, rank};
            ThreadPool pool(2);
            // out rows [T, H, rank + 3] to check the strides
            const int64_t os = rank + 3;
            test::Floats got(t * heads * os), ref(t * heads * os);
            mla_absorb_q(pool, w, q.data(), t, heads * qs, qs, got.data(), heads * os, os);
            mla_absorb_q_ref(w, q.data(), t, heads * qs, qs, ref.data(), heads * os, os);
            for (int64_t i = 0; i < t * heads; ++i) {
                test::expect_close(got.data() + i * os, ref.data() + i * os, rank, 2e-6f, "mla_absorb_q");
            }
            test::Floats got_v(t * heads * v), ref_v(t * heads * v);
            mla_expand_v(pool, w, lat.data(), t, got_v.data());
            mla_expand_v_ref(w, lat.data(), t, ref_v.data());
            test::expect_close(got_v.data(), ref_v.data(), t * heads * v, 2e-6f, "mla_expand_v");
        }
    }
}

// absorb_q -> mla_attention -> expand_v equals softmax(q_nope k_nope + q_pe k_pe) v with
// k_nope = W_UK latent and v = W_UV latent per head (one sequence, causal, in double).
TEST(MlaAttentionTest, AbsorbedEqualsExpandedAttention) {
    std::mt19937 rng(9);
    const int64_t heads = 4, nope = 16, rope = 8, v = 12, rank = 24, len = 13, q_len = 5, bs = 4;
    const int64_t row = rank + rope, nb = (len + bs - 1) / bs + 1;
    const auto w16 = test::random_bf16(heads * (nope + v) * rank, rng, 0.3f);
    const MlaKvB w{w16.data(), nullptr, heads, nope, v, rank};
    test::Floats cache(nb * bs * row), q(q_len * heads * (nope + rope));
    test::fill_uniform(cache.data(), nb * bs * row, rng);
    test::fill_uniform(q.data(), q_len * heads * (nope + rope), rng);
    std::vector<int32_t> table;
    for (int64_t i = 0; i < nb - 1; ++i) table.push_back(static_cast<int32_t>(nb - 1 - i));
    const PagedLatentLayer kv{cache.data(), nb, bs, rank, rope};
    const auto at = [&](int64_t p) { return cache.data() + (int64_t{table[size_t(p / bs)]} * bs + p % bs) * row; };
    const auto wt = [&](int64_t h, int64_t r, int64_t c) {
        return double(bf16_to_f32(w16[size_t((h * (nope + v) + r) * rank + c)]));
    };
    const float scale = 0.25f;
    ThreadPool pool(2);
    const int64_t qs = nope + rope;
    test::Floats q_abs(q_len * heads * row), lat_out(q_len * heads * rank), got(q_len * heads * v);
    mla_absorb_q(pool, w, q.data(), q_len, heads * qs, qs, q_abs.data(), heads * row, row);
    for (int64_t i = 0; i < q_len * heads; ++i) {
        for (int64_t x = 0; x < rope; ++x) q_abs[i * row + rank + x] = q[i * qs + nope + x];
    }
    const int32_t start[2] = {0, static_cast<int32_t>(q_len)};
    const int32_t lens[1] = {static_cast<int32_t>(len)};
    mla_attention(pool, kv, {q_abs.data(), lat_out.data(), q_len, heads, 1, start, lens, table.data(), nb - 1, scale});
    mla_expand_v(pool, w, lat_out.data(), q_len, got.data());
    std::vector<float> want(size_t(q_len * heads * v));
    for (int64_t i = 0; i < q_len; ++i) {
        const int64_t pos = len - q_len + i;
        for (int64_t h = 0; h < heads; ++h) {
            const float* qh = q.data() + (i * heads + h) * qs;
            std::vector<double> p(size_t(pos + 1));
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= pos; ++j) {
                double s = 0;
                for (int64_t d = 0; d < nope; ++d) {
                    double k = 0;
                    for (int64_t c = 0; c < rank; ++c) k += wt(h, d, c) * at(j)[c];
                    s += qh[d] * k;
                }
                for (int64_t d = 0; d < rope; ++d) s += double(qh[nope + d]) * at(j)[rank + d];
                mx = std::max(mx, p[size_t(j)] = s * scale);
            }
            for (auto& x : p) sum += x = std::exp(x - mx);
            for (int64_t d = 0; d < v; ++d) {
                double acc = 0;
                for (int64_t j = 0; j <= pos; ++j) {
                    double val = 0;
                    for (int64_t c = 0; c < rank; ++c) val += wt(h, nope + d, c) * at(j)[c];
                    acc += p[size_t(j)] * val;
                }
                want[size_t((i * heads + h) * v + d)] = float(acc / sum);
            }
        }
    }
    test::expect_close(got.data(), want.data(), q_len * heads * v, 5e-6f, "absorbed vs expanded");
}

}  // namespace
}  // namespace moeserve::kernels::cpu
