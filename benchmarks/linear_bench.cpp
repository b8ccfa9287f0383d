// linear_bf16 on the bench model's shapes (Qwen3-MoE-like: hidden 1024, q 2048, kv 512, experts
// 768|1024 and 1024|384, lm_head 151936), 2 threads. Decode rows (m <= 8) report GB/s of weights
// against a STREAM-style read of the same bytes; prefill rows report GFLOP/s against OpenBLAS
// cblas_sgemm (f32 weights, 2 threads), both baselines measured in this process. All figures are
// medians over calls, ours and the baseline alternating (the two cores are shared with other
// work); the Time column covers both and is not a figure.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "bench_baselines.h"
#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/bf16_panels.h"
#include "moeserve/kernels/cpu/linear.h"

namespace {

using moeserve::ThreadPool;
using namespace moeserve::bench;

constexpr int kThreads = 2;

void fill_bf16(std::vector<uint16_t>& w, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-0.05f, 0.05f);
    // Random values for the first 1M elements, then repeat (init of GiBs would dominate the run).
    const size_t pattern = std::min<size_t>(w.size(), 1 << 20);
    for (size_t i = 0; i < pattern; ++i) w[i] = moeserve::f32_to_bf16(d(rng));
    for (size_t i = pattern; i < w.size(); ++i) w[i] = w[i - pattern];
}

// The weights (copies of n x k) repacked into bf16 panels, 64-byte aligned.
std::unique_ptr<uint16_t, decltype(&std::free)> pack_copies(const std::vector<uint16_t>& w, int64_t copies, int64_t n,
                                                            int64_t k) {
    const size_t bytes = moeserve::kernels::cpu::bf16_panel_bytes(n, k);
    std::unique_ptr<uint16_t, decltype(&std::free)> p(static_cast<uint16_t*>(std::aligned_alloc(64, copies * bytes)),
                                                      &std::free);
    moeserve::ThreadPool load(1);
    for (int64_t c = 0; c < copies; ++c) {
        moeserve::kernels::cpu::pack_bf16_panels(load, w.data() + c * n * k, k, n, k, p.get() + c * bytes / 2);
    }
    return p;
}

// args: m, n, k, layout (0: row-major linear_bf16; 1: repacked panels, linear_bf16_panels).
void BM_LinearBf16(benchmark::State& state) {
    const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
    const bool panels = state.range(3) == 1;
    ThreadPool pool(kThreads);
    std::vector<float> x(size_t(m * k), 0.5f), out(size_t(m * n));
    const bool decode = m <= 8;
    const int64_t wbytes = n * k * 2;
    const int64_t copies = decode ? cold_copies(wbytes) : 1;
    std::vector<uint16_t> w(size_t(copies * n * k));
    fill_bf16(w, 1);
    auto packed = panels ? pack_copies(w, copies, n, k) : pack_copies(w, 0, n, k);
    const int64_t packed_elems = int64_t(moeserve::kernels::cpu::bf16_panel_bytes(n, k) / 2);

    // NOTE: ours and the baseline alternate call by call (medians of each), so a burst of other
    // work on the shared cores hits both sides alike. Decode: the STREAM read walks the copies
    // half a cycle behind ours, so neither finds the other's bytes in L3.
    std::vector<float> wf(decode ? 0 : size_t(n * k));
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = moeserve::bf16_to_f32(w[i]);
    std::vector<float> out_blas(out.size());
    const auto* bytes = reinterpret_cast<const uint8_t*>(w.data());
    volatile float sink = 0;
    int64_t c = 0;
    std::vector<double> times, base_times;
    for (auto _ : state) {
        double t0 = now_s();
        if (panels) {
            moeserve::kernels::cpu::linear_bf16_panels(pool, x.data(), m, k, packed.get() + c * packed_elems, n,
                                                       out.data());
        } else {
            moeserve::kernels::cpu::linear_bf16(pool, x.data(), m, k, w.data() + c * n * k, n, out.data());
        }
        times.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        t0 = now_s();
        if (decode) {
            sink = sink + stream_read(pool, bytes + ((c + copies / 2) % copies) * wbytes, wbytes);
        } else {
            sgemm_seconds(x.data(), m, k, wf.data(), n, out_blas.data(), 1);
        }
        base_times.push_back(now_s() - t0);
        c = (c + 1) % copies;
    }
    const double tb = median(base_times);
    const double baseline = decode ? double(wbytes) / tb / 1e9 : 2.0 * double(m * n * k) / tb / 1e9;
    const double t = median(times);
    if (decode) {
        const double gbps = double(wbytes) / t / 1e9;
        state.counters["GBps"] = gbps;
        state.counters["stream_GBps"] = baseline;
        state.counters["ratio_vs_stream"] = gbps / baseline;
    } else {
        const double gflops = 2.0 * double(m * n * k) / t / 1e9;
        state.counters["GFLOPS"] = gflops;
        state.counters["openblas_GFLOPS"] = baseline;
        state.counters["ratio_vs_openblas"] = gflops / baseline;
    }
}

void shapes(benchmark::internal::Benchmark* b) {
    // (n, k): q_proj, k_proj/v_proj, o_proj, experts gate|up, experts down, lm_head.
    const std::vector<std::pair<int64_t, int64_t>> nk = {{2048, 1024}, {512, 1024}, {1024, 2048},
                                                         {768, 1024},  {1024, 384}, {151936, 1024}};
    for (int64_t layout : {0, 1}) {
        for (int64_t m : {1, 4, 128, 512}) {
            for (auto [n, k] : nk) {
                if (n > 100000 && m > 128) continue;  // lm_head runs only on the sampled rows
                b->Args({m, n, k, layout});
            }
        }
        // Decode batches of 2 and 8 rows (the GEMV's other row counts) on the lm_head.
        b->Args({2, 151936, 1024, layout});
        b->Args({8, 151936, 1024, layout});
        // Serving batches of 16, 32 and 64 sequences.
        for (int64_t m : {16, 32, 64}) {
            b->Args({m, 2048, 1024, layout});
            b->Args({m, 151936, 1024, layout});
        }
        // DeepSeek-V3's real decode shapes (benchmarks/dsv3_real_dims.sh, docs/performance.md): the
        // bf16 lm_head and the dense gate|up, k = 7168, for 1 and 4 rows.
        b->Args({1, 129280, 7168, layout});
        b->Args({1, 36864, 7168, layout});
        b->Args({4, 36864, 7168, layout});
    }
    b->ArgNames({"m", "n", "k", "panels"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_LinearBf16)->Apply(shapes);

}  // namespace

int main(int argc, char** argv) {
    openblas_set_num_threads(kThreads);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("openblas", openblas_description());
    benchmark::AddCustomContext("kernel_threads", std::to_string(kThreads));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
