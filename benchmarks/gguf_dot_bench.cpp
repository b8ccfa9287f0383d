// GGUF dot products (kernels/cpu/gguf_dot.h), one thread.
// - BM_GgufMatvec, a decode GEMV: rows of a [rows, 2048] weight matrix in their stored blocks
//   against one activation row quantized to q8_0 / q8_K, reported as GB/s of weight bytes next to
//   a STREAM-style one-thread read of the same bytes, alternating call by call over copies that
//   do not fit in L3 (medians).
// - BM_GgufExpertGemm, a prefill expert: gguf_linear of 64 token rows through one expert-sized
//   [384, 1024] weight matrix (cache-resident, as a prefill's expert is while its tokens pass),
//   reported as GMAC/s: the tiles' compute rate. MOESERVE_ISA=avx2 against the default level
//   gives the AVX-512 tiles' gain; MOESERVE_ISA=ref against avx2 the AVX2 pair kernels' gain over
//   the scalar reference.
// - BM_GgufDecodeLinear, the decode GEMV as a model runs it: gguf_linear of one token through the
//   same [4096, 2048] matrices on a pool of state.range(0) threads (the tiles, the rows split among
//   the threads), GB/s of weight bytes next to the STREAM read on the same pool (MXFP4 against
//   Q4_0: 17 against 18 bytes per 32 weights).
// - BM_GgufDecodePackedVsStored: that GEMV on the stored rows and on the same rows packed in
//   groups of 8 (gguf_packed.h), alternating, with the STREAM read.
// - BM_GgufQuantizeActivations: the q8_0 / q8_K activation quantizers on 16384 elements.
// - BM_GgufPackedTile: the packed tiles alone on the prefill expert's product (activations
//   quantized and prepared once, outside the timing).
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_baselines.h"
#include "moeserve/core/ggml_type.h"
#include "moeserve/kernels/cpu/gguf_dot.h"
#include "moeserve/kernels/cpu/gguf_linear.h"
#include "moeserve/kernels/cpu/gguf_packed.h"
#include "moeserve/kernels/cpu/gguf_quantize.h"

namespace {

using moeserve::GgmlType;
using moeserve::ThreadPool;
using namespace moeserve::bench;
namespace kc = moeserve::kernels::cpu;

constexpr int64_t kCols = 2048;  // Qwen3-MoE hidden size
constexpr int64_t kRows = 4096;

// [kRows, kCols] of `type` quantized from normal floats, `copies` times back to back.
std::vector<uint8_t> cold_matrices(GgmlType type, int64_t copies) {
    const int64_t row_bytes = static_cast<int64_t>(*moeserve::ggml_nbytes(type, kCols));
    const int64_t bytes = row_bytes * kRows;
    std::vector<uint8_t> w(static_cast<size_t>(bytes * copies));
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    std::vector<float> row(kCols);
    for (int64_t r = 0; r < kRows; ++r) {
        for (float& v : row) v = normal(rng);
        kc::quantize_gguf(type, row.data(), w.data() + r * row_bytes, kCols);
    }
    for (int64_t c = 1; c < copies; ++c) std::copy_n(w.begin(), bytes, w.begin() + c * bytes);
    return w;
}

void BM_GgufMatvec(benchmark::State& state, GgmlType type) {
    const int64_t row_bytes = static_cast<int64_t>(*moeserve::ggml_nbytes(type, kCols));
    const int64_t bytes = row_bytes * kRows;
    const int64_t copies = cold_copies(bytes);
    const std::vector<uint8_t> w = cold_matrices(type, copies);
    std::vector<float> x(kCols, 0.25f);
    const GgmlType at = kc::gguf_dot_activation_type(type);
    std::vector<uint64_t> a((*moeserve::ggml_nbytes(at, kCols) + 7) / 8);
    kc::quantize_gguf(at, x.data(), a.data(), kCols);
    std::vector<float> out(kRows);
    ThreadPool pool(1);
    std::vector<double> ours, stream;
    int64_t it = 0;
    volatile float sink = 0;
    for (auto _ : state) {
        const uint8_t* wc = w.data() + (it % copies) * bytes;
        double t0 = now_s();
        kc::gguf_matvec(type, kRows, kCols, wc, a.data(), out.data());
        ours.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        const uint8_t* sc = w.data() + ((it + copies / 2) % copies) * bytes;
        t0 = now_s();
        sink = sink + stream_read(pool, sc, bytes);
        stream.push_back(now_s() - t0);
        ++it;
    }
    const double gbps = double(bytes) / median(ours) / 1e9;
    const double stream_gb = double(bytes) / median(stream) / 1e9;
    state.counters["GBps"] = gbps;
    state.counters["stream_GBps"] = stream_gb;
    state.counters["of_stream"] = gbps / stream_gb;
}

void BM_GgufDecodeLinear(benchmark::State& state, GgmlType type) {
    const auto row_bytes = static_cast<size_t>(*moeserve::ggml_nbytes(type, kCols));
    const int64_t bytes = static_cast<int64_t>(row_bytes) * kRows;
    const int64_t copies = cold_copies(bytes);
    const std::vector<uint8_t> w = cold_matrices(type, copies);
    const std::vector<float> x(kCols, 0.25f);
    std::vector<float> out(kRows);
    kc::GgufScratch scratch;
    ThreadPool pool(static_cast<int>(state.range(0)));
    std::vector<double> ours, stream;
    int64_t it = 0;
    volatile float sink = 0;
    for (auto _ : state) {
        const moeserve::kernels::GgufMatrix m{type, w.data() + (it % copies) * bytes, kRows, kCols, row_bytes};
        double t0 = now_s();
        kc::gguf_linear(pool, x.data(), 1, m, out.data(), scratch);
        ours.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        t0 = now_s();
        sink = sink + stream_read(pool, w.data() + ((it + copies / 2) % copies) * bytes, bytes);
        stream.push_back(now_s() - t0);
        ++it;
    }
    const double gbps = double(bytes) / median(ours) / 1e9;
    const double stream_gb = double(bytes) / median(stream) / 1e9;
    state.counters["GBps"] = gbps;
    state.counters["stream_GBps"] = stream_gb;
    state.counters["of_stream"] = gbps / stream_gb;
    state.counters["weights_per_us"] = double(kRows * kCols) / median(ours) / 1e6;
}

// The decode GEMV of BM_GgufDecodeLinear on the rows as stored and on the same rows packed
// (kernels/cpu/gguf_packed.h), alternating call by call over cold copies, with the STREAM read:
// GB/s of the stored bytes for both, and packed / stored.
void BM_GgufDecodePackedVsStored(benchmark::State& state, GgmlType type) {
    const auto row_bytes = static_cast<size_t>(*moeserve::ggml_nbytes(type, kCols));
    const int64_t bytes = static_cast<int64_t>(row_bytes) * kRows;
    const int64_t copies = cold_copies(bytes);
    const std::vector<uint8_t> w = cold_matrices(type, copies);
    std::vector<uint8_t> packed(w.size());
    std::vector<moeserve::kernels::GgufMatrix> stored_m, packed_m;
    ThreadPool load(1);
    for (int64_t c = 0; c < copies; ++c) {
        stored_m.push_back({type, w.data() + c * bytes, kRows, kCols, row_bytes});
        packed_m.push_back(kc::gguf_pack(load, stored_m.back(), packed.data() + c * bytes));
    }
    const std::vector<float> x(kCols, 0.25f);
    std::vector<float> out(kRows);
    kc::GgufScratch scratch;
    ThreadPool pool(static_cast<int>(state.range(0)));
    std::vector<double> t_stored, t_packed, stream;
    int64_t it = 0;
    volatile float sink = 0;
    for (auto _ : state) {
        double t0 = now_s();
        kc::gguf_linear(pool, x.data(), 1, stored_m[static_cast<size_t>(it % copies)], out.data(), scratch);
        t_stored.push_back(now_s() - t0);
        t0 = now_s();
        kc::gguf_linear(pool, x.data(), 1, packed_m[static_cast<size_t>((it + 1) % copies)], out.data(), scratch);
        t_packed.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        t0 = now_s();
        sink = sink + stream_read(pool, w.data() + ((it + copies / 2) % copies) * bytes, bytes);
        stream.push_back(now_s() - t0);
        ++it;
    }
    state.counters["stored_GBps"] = double(bytes) / median(t_stored) / 1e9;
    state.counters["packed_GBps"] = double(bytes) / median(t_packed) / 1e9;
    state.counters["stream_GBps"] = double(bytes) / median(stream) / 1e9;
    state.counters["packed_x"] = median(t_stored) / median(t_packed);
}

// A prefill expert: kTokens token rows through one expert-sized [kOut, kIn] matrix of `type`.
constexpr int64_t kTokens = 64, kIn = 1024, kOut = 384;
struct ExpertProduct {
    std::vector<uint8_t> w;
    std::vector<float> x;  // [kTokens, kIn]
    moeserve::kernels::GgufMatrix m;
};

ExpertProduct expert_product(GgmlType type) {
    ExpertProduct e;
    const int64_t row_bytes = static_cast<int64_t>(*moeserve::ggml_nbytes(type, kIn));
    e.w.resize(static_cast<size_t>(row_bytes * kOut));
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    e.x.resize(static_cast<size_t>(kIn * kOut));
    for (float& v : e.x) v = normal(rng);
    for (int64_t r = 0; r < kOut; ++r) kc::quantize_gguf(type, e.x.data() + r * kIn, e.w.data() + r * row_bytes, kIn);
    e.x.resize(static_cast<size_t>(kTokens * kIn));
    e.m = {type, e.w.data(), kOut, kIn, static_cast<size_t>(row_bytes)};
    return e;
}

void BM_GgufExpertGemm(benchmark::State& state, GgmlType type) {
    const ExpertProduct e = expert_product(type);
    std::vector<float> out(static_cast<size_t>(kTokens * kOut));
    kc::GgufScratch scratch;
    ThreadPool pool(1);
    for (auto _ : state) {
        kc::gguf_linear(pool, e.x.data(), kTokens, e.m, out.data(), scratch);
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["GMACps"] = benchmark::Counter(static_cast<double>(kTokens * kIn * kOut) * 1e-9,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

// The packed tiles alone on BM_GgufExpertGemm's product: the activation rows quantized and
// prepared once, then every group of 8 weight rows times every 4 token rows (GgufTiles::run, the
// active level's tile). GMAC/s; MACs a cycle are that over the clock (docs/performance.md).
void BM_GgufPackedTile(benchmark::State& state, GgmlType type) {
    const ExpertProduct e = expert_product(type);
    std::vector<uint8_t> packed_bytes(kc::gguf_packed_bytes(type, kOut, kIn));
    ThreadPool load(1);
    const moeserve::kernels::GgufMatrix m = kc::gguf_pack(load, e.m, packed_bytes.data());
    const kc::GgufTiles tiles(type, m.packed_rows);
    const GgmlType at = kc::gguf_dot_activation_type(type);
    const size_t qrow = *moeserve::ggml_nbytes(at, kIn);
    const int64_t nb = kIn / moeserve::ggml_traits(type).block_size;
    const size_t prepared = tiles.prepared_row_bytes(nb);
    const size_t arow = prepared != 0 ? prepared : qrow;
    std::vector<uint8_t> q(qrow * kTokens), a(arow * kTokens);
    for (int64_t t = 0; t < kTokens; ++t) {
        kc::quantize_gguf_activations(at, e.x.data() + t * kIn, q.data() + qrow * t, kIn);
        if (prepared != 0) tiles.prepare(q.data() + qrow * t, nb, a.data() + arow * t);
    }
    const std::vector<uint8_t>& rows = prepared != 0 ? a : q;
    std::vector<float> out(static_cast<size_t>(kTokens * kOut));
    const int step = tiles.row_step();  // 8: kOut is a multiple
    for (auto _ : state) {
        for (int64_t t = 0; t < kTokens; t += kc::kGgufTileCols) {
            const uint8_t* acts[kc::kGgufTileCols];
            for (int c = 0; c < kc::kGgufTileCols; ++c) acts[c] = rows.data() + arow * (t + c);
            for (int64_t j = 0; j < kOut; j += step) {
                tiles.run(nb, step, kc::kGgufTileCols, m.rows_from(j), m.row_stride, acts, out.data() + t * kOut + j,
                          kOut);
            }
        }
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["GMACps"] = benchmark::Counter(static_cast<double>(kTokens * kIn * kOut) * 1e-9,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

// quantize_gguf_activations of 16384 elements (gguf_linear's threshold for splitting rows over
// the pool), q8_0 or q8_K at the active level.
void BM_GgufQuantizeActivations(benchmark::State& state, GgmlType act) {
    constexpr int64_t kElements = 16384;
    std::vector<float> x(kElements);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> q(*moeserve::ggml_nbytes(act, kElements));
    for (auto _ : state) {
        kc::quantize_gguf_activations(act, x.data(), q.data(), kElements);
        benchmark::DoNotOptimize(q.data());
    }
}

// BM_GgufExpertGemm's product on the stored rows and on the same rows packed, alternating:
// GMAC/s of each and packed / stored.
void BM_GgufExpertGemmPackedVsStored(benchmark::State& state, GgmlType type) {
    const ExpertProduct e = expert_product(type);
    const moeserve::kernels::GgufMatrix& stored = e.m;
    const std::vector<float>& x = e.x;
    std::vector<uint8_t> packed_bytes(kc::gguf_packed_bytes(type, kOut, kIn));
    ThreadPool load(1);
    const moeserve::kernels::GgufMatrix packed = kc::gguf_pack(load, stored, packed_bytes.data());
    std::vector<float> out(static_cast<size_t>(kTokens * kOut));
    kc::GgufScratch scratch;
    ThreadPool pool(1);
    std::vector<double> t_stored, t_packed;
    for (auto _ : state) {
        double t0 = now_s();
        kc::gguf_linear(pool, x.data(), kTokens, stored, out.data(), scratch);
        t_stored.push_back(now_s() - t0);
        t0 = now_s();
        kc::gguf_linear(pool, x.data(), kTokens, packed, out.data(), scratch);
        t_packed.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
    }
    const double macs = static_cast<double>(kTokens * kIn * kOut);
    state.counters["stored_GMACps"] = macs / median(t_stored) / 1e9;
    state.counters["packed_GMACps"] = macs / median(t_packed) / 1e9;
    state.counters["packed_x"] = median(t_stored) / median(t_packed);
}

BENCHMARK_CAPTURE(BM_GgufExpertGemm, Q4_0, GgmlType::kQ4_0)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufExpertGemm, Q8_0, GgmlType::kQ8_0)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufExpertGemm, Q2_K, GgmlType::kQ2_K)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufExpertGemm, Q3_K, GgmlType::kQ3_K)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufExpertGemm, Q4_K, GgmlType::kQ4_K)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufExpertGemm, Q6_K, GgmlType::kQ6_K)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufExpertGemm, MXFP4, GgmlType::kMXFP4)->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_CAPTURE(BM_GgufQuantizeActivations, q8_0, GgmlType::kQ8_0)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GgufQuantizeActivations, q8_K, GgmlType::kQ8_K)->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_GgufMatvec, Q4_0, GgmlType::kQ4_0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufMatvec, Q8_0, GgmlType::kQ8_0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufMatvec, Q2_K, GgmlType::kQ2_K)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufMatvec, Q3_K, GgmlType::kQ3_K)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufMatvec, Q4_K, GgmlType::kQ4_K)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufMatvec, Q5_K, GgmlType::kQ5_K)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufMatvec, Q6_K, GgmlType::kQ6_K)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufMatvec, MXFP4, GgmlType::kMXFP4)->Unit(benchmark::kMillisecond)->UseRealTime();

// Q4_0 and MXFP4 side by side, same shape, 2 threads (the bench machine's cores)
BENCHMARK_CAPTURE(BM_GgufDecodeLinear, Q4_0, GgmlType::kQ4_0)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GgufDecodeLinear, MXFP4, GgmlType::kMXFP4)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// stored rows against packed for the types with a packed layout: the decode GEMV at 1 and 2
// threads, the prefill expert at one
const int kPackedBenchmarks = [] {
    const std::pair<const char*, GgmlType> types[] = {
        {"Q4_0", GgmlType::kQ4_0}, {"Q4_1", GgmlType::kQ4_1},   {"Q5_0", GgmlType::kQ5_0}, {"Q5_1", GgmlType::kQ5_1},
        {"Q8_0", GgmlType::kQ8_0}, {"MXFP4", GgmlType::kMXFP4}, {"Q2_K", GgmlType::kQ2_K}, {"Q3_K", GgmlType::kQ3_K},
        {"Q4_K", GgmlType::kQ4_K}, {"Q5_K", GgmlType::kQ5_K},   {"Q6_K", GgmlType::kQ6_K}};
    for (const auto& [name, type] : types) {
        benchmark::RegisterBenchmark((std::string("BM_GgufExpertGemmPackedVsStored/") + name).c_str(),
                                     BM_GgufExpertGemmPackedVsStored, type)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark((std::string("BM_GgufPackedTile/") + name).c_str(), BM_GgufPackedTile, type)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark((std::string("BM_GgufDecodePackedVsStored/") + name).c_str(),
                                     BM_GgufDecodePackedVsStored, type)
            ->Arg(1)
            ->Arg(2)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
    return 0;
}();

}  // namespace

BENCHMARK_MAIN();
