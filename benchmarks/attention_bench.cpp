// paged_attention on the bench model's attention (16 query heads, 4 kv heads, head_dim 128,
// block size 16), 2 threads. Decode (8 sequences x context 2048) reports GB/s of K/V read against a
// STREAM-style read of the same bytes; prefill (one 512-token chunk after 0, 1536 or 15872 tokens of
// context, bf16 cache) reports GFLOP/s (QK^T and PV multiply-adds of the causal part); it and the
// one-sequence decode at 4096 / 16384 context time the AVX2 kernels in the same loop where the CPU
// runs AVX-512 (speedup_vs_avx2). No OpenBLAS baseline:
// it has no paged attention; the ratio to STREAM bounds decode. Decode with cache=1 reads a bf16
// KV cache (--kv-cache-dtype bf16: half the bytes), cache=2 an fp8 one (--kv-cache-dtype fp8: e4m3
// codes + an f32 scale per row, ~a quarter), and both also time the f32 cache in the same loop:
// speedup_vs_f32 = median f32 time / median time of that cache. BM_AttentionDecodeEngineLayout
// decodes one sequence in the engine's cache layout against a STREAM read; BM_MlaDecodeLong
// times MLA decode of one head group at 2 threads against 1 (split-KV).
#include <benchmark/benchmark.h>

#include <numeric>
#include <random>
#include <vector>

#include "bench_baselines.h"
#include "moeserve/core/dtype.h"
#include "moeserve/core/tensor.h"
#include "moeserve/kernels/cpu/isa.h"
#include "moeserve/kernels/cpu/mla_attention.h"
#include "moeserve/kernels/cpu/paged_attention.h"

namespace {

using moeserve::ThreadPool;
using namespace moeserve::bench;
namespace kc = moeserve::kernels::cpu;

constexpr int kThreads = 2;
constexpr int64_t kHeads = 16, kKvHeads = 4, kDim = 128, kBlock = 16;

struct Batch {
    std::vector<float> k, v, q, out;
    std::vector<uint16_t> kh, vh;  // the bf16 cache (when asked for)
    std::vector<uint8_t> k8, v8;   // the fp8 cache (when asked for) and its row scales
    std::vector<float> ks, vs;
    std::vector<int32_t> tables, qstart, lens;
    int64_t max_blocks = 0, tokens = 0;
    moeserve::kernels::PagedKvLayer kv{};
    moeserve::kernels::PagedAttentionArgs args{};
};

enum class Cache { kF32 = 0, kBf16 = 1, kFp8 = 2 };

// num_seqs sequences of seq_len tokens each, the last q_len of which are queries.
void make_batch(Batch& b, int64_t num_seqs, int64_t seq_len, int64_t q_len, Cache cache = Cache::kF32) {
    b.max_blocks = (seq_len + kBlock - 1) / kBlock;
    const int64_t num_blocks = num_seqs * b.max_blocks + 1;
    b.k.assign(size_t(num_blocks * kBlock * kKvHeads * kDim), 0.01f);
    b.v.assign(b.k.size(), 0.02f);
    std::vector<int32_t> ids(size_t(num_blocks - 1));
    std::iota(ids.begin(), ids.end(), 1);
    std::mt19937 rng(1);
    std::shuffle(ids.begin(), ids.end(), rng);
    b.tables.assign(ids.begin(), ids.end());
    b.qstart.resize(size_t(num_seqs + 1));
    b.lens.assign(size_t(num_seqs), int32_t(seq_len));
    for (int64_t s = 0; s <= num_seqs; ++s) b.qstart[size_t(s)] = int32_t(s * q_len);
    b.tokens = num_seqs * q_len;
    b.q.assign(size_t(b.tokens * kHeads * kDim), 0.1f);
    b.out.resize(b.q.size());
    b.kv = {b.k.data(), b.v.data(), num_blocks, kBlock, kKvHeads, kDim};
    if (cache == Cache::kFp8) {  // code 0x38 = 1.0, scales 0.01 and 0.02: the same values
        b.k8.assign(b.k.size(), 0x38);
        b.v8.assign(b.v.size(), 0x38);
        b.ks.assign(b.k.size() / size_t(kDim), 0.01f);
        b.vs.assign(b.ks.size(), 0.02f);
        b.k.clear();
        b.v.clear();
        b.kv = {b.k8.data(), b.v8.data(), num_blocks, kBlock, kKvHeads, kDim, moeserve::DType::kF8E4M3,
                b.ks.data(), b.vs.data()};
    }
    if (cache == Cache::kBf16) {
        b.kh.assign(b.k.size(), moeserve::f32_to_bf16(0.01f));
        b.vh.assign(b.v.size(), moeserve::f32_to_bf16(0.02f));
        b.k.clear();
        b.v.clear();
        b.kv = {b.kh.data(), b.vh.data(), num_blocks, kBlock, kKvHeads, kDim, moeserve::DType::kBF16};
    }
    b.args = {b.q.data(),      b.out.data(),  b.tokens,        kHeads,       num_seqs,
              b.qstart.data(), b.lens.data(), b.tables.data(), b.max_blocks, 0.0883883f};
}

void BM_AttentionDecode(benchmark::State& state) {
    const int64_t num_seqs = 8, ctx = state.range(0);
    const auto cache = static_cast<Cache>(state.range(1));
    const bool vs_f32 = cache != Cache::kF32;
    ThreadPool pool(kThreads);
    // Several batches so the K/V of one call is not still in L3 from the previous one.
    const int64_t row_bytes = cache == Cache::kFp8 ? kDim + 4 : kDim * (cache == Cache::kBf16 ? 2 : 4);
    const int64_t kv_bytes = num_seqs * ctx * kKvHeads * row_bytes * 2;
    const int64_t copies = cold_copies(kv_bytes);
    std::vector<Batch> batches(static_cast<size_t>(copies)), f32_batches(static_cast<size_t>(vs_f32 ? copies : 0));
    for (auto& b : batches) make_batch(b, num_seqs, ctx, 1, cache);
    for (auto& b : f32_batches) make_batch(b, num_seqs, ctx, 1);
    std::vector<uint8_t> buf(size_t(copies * kv_bytes), 1);
    volatile float sink = 0;
    int64_t it = 0;
    std::vector<double> times, base_times, f32_times;
    for (auto _ : state) {  // ours and the STREAM read alternate; medians of each
        Batch& b = batches[size_t(it % copies)];
        double t0 = now_s();
        kc::paged_attention(pool, b.kv, b.args);
        times.push_back(now_s() - t0);
        benchmark::DoNotOptimize(b.out.data());
        if (vs_f32) {
            Batch& f = f32_batches[size_t(it % copies)];
            t0 = now_s();
            kc::paged_attention(pool, f.kv, f.args);
            f32_times.push_back(now_s() - t0);
            benchmark::DoNotOptimize(f.out.data());
        }
        t0 = now_s();
        sink = sink + stream_read(pool, buf.data() + (it % copies) * kv_bytes, kv_bytes);
        base_times.push_back(now_s() - t0);
        ++it;
    }
    const double gbps = double(kv_bytes) / median(times) / 1e9;
    const double stream = double(kv_bytes) / median(base_times) / 1e9;
    state.counters["GBps"] = gbps;
    state.counters["stream_GBps"] = stream;
    state.counters["ratio_vs_stream"] = gbps / stream;
    if (vs_f32) state.counters["speedup_vs_f32"] = median(f32_times) / median(times);
}

// Times paged_attention at the process's level and, where that is above avx2, at avx2 in the same
// loop (alternating): the AVX-512 kernels against the AVX2 ones they replace. Returns the medians
// {best level, avx2} (avx2's is 0 when the best level is avx2).
struct IsaTimes {
    double best = 0, avx2 = 0;
};
IsaTimes time_against_avx2(benchmark::State& state, ThreadPool& pool, const Batch& b) {
    const kc::Isa best = kc::active_isa();
    const bool vs_avx2 = best > kc::Isa::kAvx2;
    std::vector<double> times, avx2_times;
    for (auto _ : state) {
        double t0 = now_s();
        kc::paged_attention(pool, b.kv, b.args);
        times.push_back(now_s() - t0);
        benchmark::DoNotOptimize(b.out.data());
        if (vs_avx2) {
            kc::set_active_isa(kc::Isa::kAvx2);
            t0 = now_s();
            kc::paged_attention(pool, b.kv, b.args);
            avx2_times.push_back(now_s() - t0);
            kc::set_active_isa(best);
        }
    }
    return {median(times), vs_avx2 ? median(avx2_times) : 0.0};
}

// One 512-token chunk after ctx_before tokens of context, bf16 cache (the serving default).
void BM_AttentionPrefill(benchmark::State& state) {
    const int64_t q_len = 512, ctx = state.range(0) + q_len;
    ThreadPool pool(kThreads);
    Batch b;
    make_batch(b, 1, ctx, q_len, Cache::kBf16);
    double keys = 0;  // sum over queries of attended keys
    for (int64_t i = 0; i < q_len; ++i) keys += double(ctx - q_len + i + 1);
    const double flops = keys * double(kHeads) * double(kDim) * 4.0;
    const IsaTimes t = time_against_avx2(state, pool, b);
    state.counters["GFLOPS"] = flops / t.best / 1e9;
    if (t.avx2 > 0) state.counters["speedup_vs_avx2"] = t.avx2 / t.best;
}

// One sequence decoding at a long context, bf16 cache: the 4 kv heads are the only parallelism.
void BM_AttentionDecodeLong(benchmark::State& state) {
    const int64_t ctx = state.range(0);
    ThreadPool pool(kThreads);
    Batch b;
    make_batch(b, 1, ctx, 1, Cache::kBf16);
    const IsaTimes t = time_against_avx2(state, pool, b);
    state.counters["GBps"] = double(ctx * kKvHeads * kDim * 2 * 2) / t.best / 1e9;
    if (t.avx2 > 0) state.counters["speedup_vs_avx2"] = t.avx2 / t.best;
}

// gpt-oss's sliding layers: a window of 128 keys, at the end of a 16384-token context: a 512-token
// prefill chunk and one decode token, bf16 cache. Before the AVX-512 kernels took windows, every
// level ran the AVX2 group kernel (speedup_vs_avx2).
void BM_AttentionSlidingWindow(benchmark::State& state) {
    const int64_t q_len = state.range(0), ctx = 16384, window = 128;
    ThreadPool pool(kThreads);
    Batch b;
    make_batch(b, 1, ctx, q_len, Cache::kBf16);
    b.args.window = window;
    const IsaTimes t = time_against_avx2(state, pool, b);
    const double keys = double(q_len) * double(window);  // every query sees a full window here
    state.counters["GFLOPS"] = keys * double(kHeads) * double(kDim) * 4.0 / t.best / 1e9;
    if (t.avx2 > 0) state.counters["speedup_vs_avx2"] = t.avx2 / t.best;
}

BENCHMARK(BM_AttentionDecode)
    ->Args({2048, 0})
    ->Args({2048, 1})
    ->Args({2048, 2})
    ->ArgNames({"ctx", "cache"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_AttentionPrefill)
    ->Arg(0)
    ->Arg(1536)
    ->Arg(15872)
    ->ArgName("ctx_before")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_AttentionDecodeLong)->Arg(4096)->Arg(16384)->ArgName("ctx")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_AttentionSlidingWindow)
    ->Arg(1)
    ->Arg(512)
    ->ArgName("queries")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

// One sequence decoding at a long context as the engine holds it: the peer's bench model's
// attention (head_dim 64, 16 query / 4 kv heads), a bf16 cache in the engine's allocation (2 MiB
// pages where the kernel gives them) with the sequence's blocks in order, as a fresh engine hands
// them out. GB/s of K/V read against a STREAM-style read of the same bytes in the same loop.
void BM_AttentionDecodeEngineLayout(benchmark::State& state) {
    constexpr int64_t kD = 64;
    const int64_t ctx = state.range(0), blocks = ctx / kBlock + 1, row = kKvHeads * kD;
    const size_t cache_bytes = size_t(blocks * kBlock * row) * 2;
    auto* k = static_cast<uint16_t*>(moeserve::aligned_alloc_zeroed(cache_bytes));
    auto* v = static_cast<uint16_t*>(moeserve::aligned_alloc_zeroed(cache_bytes));
    for (size_t i = 0; i < cache_bytes / 2; ++i) {
        k[i] = moeserve::f32_to_bf16(0.01f * float(i % 7));
        v[i] = moeserve::f32_to_bf16(0.02f * float(i % 5));
    }
    std::vector<int32_t> table(size_t(blocks - 1));
    std::iota(table.begin(), table.end(), 1);
    std::vector<float> q(size_t(kHeads * kD), 0.1f), out(q.size());
    const int32_t qstart[2] = {0, 1}, len = int32_t(ctx);
    const moeserve::kernels::PagedKvLayer kv{k, v, blocks, kBlock, kKvHeads, kD, moeserve::DType::kBF16};
    const moeserve::kernels::PagedAttentionArgs args{q.data(), out.data(),   1,          kHeads, 1, qstart,
                                                     &len,     table.data(), blocks - 1, 0.125f};
    ThreadPool pool(kThreads);
    const int64_t kv_bytes = ctx * row * 2 * 2;
    std::vector<uint8_t> buf(size_t(kv_bytes), 1);
    volatile float sink = 0;
    std::vector<double> times, base_times;
    for (auto _ : state) {
        double t0 = now_s();
        kc::paged_attention(pool, kv, args);
        times.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        t0 = now_s();
        sink = sink + stream_read(pool, buf.data(), kv_bytes);
        base_times.push_back(now_s() - t0);
    }
    state.counters["GBps"] = double(kv_bytes) / median(times) / 1e9;
    state.counters["stream_GBps"] = double(kv_bytes) / median(base_times) / 1e9;
    moeserve::aligned_free(k, cache_bytes);
    moeserve::aligned_free(v, cache_bytes);
}
BENCHMARK(BM_AttentionDecodeEngineLayout)
    ->Arg(4096)
    ->Arg(16384)
    ->Arg(65536)
    ->ArgName("ctx")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// MLA decode of one token over a long context with the DeepSeek bench model's latent (kv_lora_rank
// 256, rope 32), bf16 cache, 16 heads (one rank) or 8 (a TP=2 rank's share): 2 threads against 1
// in the same loop. 8 heads are one AVX2 head group: before split-KV, one item for one thread.
void BM_MlaDecodeLong(benchmark::State& state) {
    constexpr int64_t kRank = 256, kRope = 32, kRow = kRank + kRope;
    const int64_t ctx = state.range(0), kMlaHeads = state.range(1), blocks = ctx / kBlock + 1;
    std::vector<uint16_t> cache(size_t(blocks * kBlock * kRow), moeserve::f32_to_bf16(0.01f));
    std::vector<int32_t> table(size_t(blocks - 1));
    std::iota(table.begin(), table.end(), 1);
    std::vector<float> q(size_t(kMlaHeads * kRow), 0.1f), out(size_t(kMlaHeads * kRank));
    const int32_t qstart[2] = {0, 1}, len = int32_t(ctx);
    const moeserve::kernels::PagedLatentLayer kv{cache.data(), blocks, kBlock, kRank, kRope, moeserve::DType::kBF16};
    const moeserve::kernels::MlaAttentionArgs args{q.data(), out.data(),   1,          kMlaHeads, 1, qstart,
                                                   &len,     table.data(), blocks - 1, 0.1f};
    ThreadPool two(2), one(1);
    std::vector<double> times, one_times;
    for (auto _ : state) {
        double t0 = now_s();
        kc::mla_attention(two, kv, args);
        times.push_back(now_s() - t0);
        t0 = now_s();
        kc::mla_attention(one, kv, args);
        one_times.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["GFLOPS"] = double(ctx * kMlaHeads * (kRow + kRank) * 2) / median(times) / 1e9;
    state.counters["speedup_vs_1_thread"] = median(one_times) / median(times);
}
BENCHMARK(BM_MlaDecodeLong)
    ->Args({4096, 16})
    ->Args({16384, 16})
    ->Args({4096, 8})
    ->Args({16384, 8})
    ->ArgNames({"ctx", "heads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The same decode over an fp8 latent cache (--kv-cache-dtype fp8, DeepSeek's full 512 + 64 latent, so
// both parts are whole vectors), 16 heads, 2 threads: the process's level (AVX-512: the flash
// kernel, each row widened and scaled once) against AVX2 (per-row factors folded into the tiles)
// in the same loop, alternating.
void BM_MlaDecodeLongFp8(benchmark::State& state) {
    constexpr int64_t kRank = 512, kRope = 64, kRow = kRank + kRope, kMlaHeads = 16;
    const int64_t ctx = state.range(0), blocks = ctx / kBlock + 1;
    std::vector<uint8_t> cache(size_t(blocks * kBlock * kRow), 0x38);  // e4m3 1.0
    std::vector<float> scales(size_t(blocks * kBlock * 2), 0.01f);
    std::vector<int32_t> table(size_t(blocks - 1));
    std::iota(table.begin(), table.end(), 1);
    std::vector<float> q(size_t(kMlaHeads * kRow), 0.1f), out(size_t(kMlaHeads * kRank));
    const int32_t qstart[2] = {0, 1}, len = int32_t(ctx);
    const moeserve::kernels::PagedLatentLayer kv{cache.data(), blocks, kBlock, kRank, kRope, moeserve::DType::kF8E4M3,
                                                 scales.data()};
    const moeserve::kernels::MlaAttentionArgs args{q.data(), out.data(),   1,          kMlaHeads, 1, qstart,
                                                   &len,     table.data(), blocks - 1, 0.1f};
    ThreadPool pool(2);
    const kc::Isa best = kc::active_isa();
    std::vector<double> times, avx2_times;
    for (auto _ : state) {
        double t0 = now_s();
        kc::mla_attention(pool, kv, args);
        times.push_back(now_s() - t0);
        kc::set_active_isa(kc::Isa::kAvx2);
        t0 = now_s();
        kc::mla_attention(pool, kv, args);
        avx2_times.push_back(now_s() - t0);
        kc::set_active_isa(best);
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["GFLOPS"] = double(ctx * kMlaHeads * (kRow + kRank) * 2) / median(times) / 1e9;
    state.counters["speedup_vs_avx2"] = median(avx2_times) / median(times);
}
BENCHMARK(BM_MlaDecodeLongFp8)->Arg(4096)->Arg(16384)->ArgName("ctx")->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
