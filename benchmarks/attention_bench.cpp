// paged_attention on the bench model's attention (16 query heads, 4 kv heads, head_dim 128,
// block size 16), 2 threads. Decode (8 sequences x context 2048) reports GB/s of K/V read against a
// STREAM-style read of the same bytes; prefill (one 512-token chunk after 0, 1536 or 15872 tokens of
// context, bf16 cache) reports GFLOP/s (QK^T and PV multiply-adds of the causal part); it and the
// one-sequence decode at 4096 / 16384 context time the AVX2 kernels in the same loop where the CPU
// runs AVX-512 (speedup_vs_avx2). No OpenBLAS baseline:
// it has no paged attention; the ratio to STREAM bounds decode. Decode with cache=1 reads a bf16
// KV cache (--kv-cache-dtype bf16: half the bytes), cache=2 an fp8 one (--kv-cache-dtype fp8: e4m3
// codes + an f32 scale per row, ~a quarter), and both also time the f32 cache in the same loop:
// speedup_vs_f32 = median f32 time / median time of that cache.
#include <benchmark/benchmark.h>

#include <numeric>
#include <random>
#include <vector>

#include "bench_baselines.h"
#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/isa.h"
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
    kc::PagedKvLayer kv{};
    kc::PagedAttentionArgs args{};
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

}  // namespace

BENCHMARK_MAIN();
