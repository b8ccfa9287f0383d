// W8A8 int8 kernels on the bench model's shapes, 2 threads, each against baselines measured in
// the same run, alternating call by call (medians; the two cores are shared):
//   decode (m = 1, 4): linear_int8 GB/s of int8 weights + scales vs a STREAM-style read of the
//     same bytes, and the time ratio to linear_bf16 on the same shape (bf16 reads twice the bytes);
//   prefill (m = 128, 512): GFLOP/s (2 m n k, activation quantization and rescale included) vs
//     our linear_bf16 GEMM and vs oneDNN's s8 x s8 -> s32 matmul (no scales: less work than ours);
//   MoE decode / prefill on the bench experts (64 x [768|384, 1024], top-8): int8 vs bf16.
#include <benchmark/benchmark.h>

#include <numeric>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

#include "bench_baselines.h"
#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/linear.h"
#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/moe_experts.h"
#include "moeserve/kernels/cpu/moe_experts_int8.h"

namespace {

using moeserve::ThreadPool;
using namespace moeserve::bench;
namespace kc = moeserve::kernels::cpu;

constexpr int kThreads = 2;

template <typename T>
void fill_pattern(std::vector<T>& w, T (*make)(float), uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    const size_t pattern = std::min<size_t>(w.size(), 1 << 20);
    for (size_t i = 0; i < pattern; ++i) w[i] = make(d(rng));
    for (size_t i = pattern; i < w.size(); ++i) w[i] = w[i - pattern];
}
int8_t make_i8(float v) { return static_cast<int8_t>(v * 127.0f); }
uint16_t make_bf16(float v) { return moeserve::f32_to_bf16(0.05f * v); }

// oneDNN s8 [m, k] x s8 [k, n] (stored [n, k]: format ba) -> s32 [m, n].
struct OneDnnMatmul {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream strm{eng};
    dnnl::matmul prim;
    dnnl::memory a, b, c;
    OneDnnMatmul(int64_t m, int64_t n, int64_t k, int8_t* x, int8_t* w, int32_t* out) {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        dnnl::memory::desc ad({m, k}, dt::s8, tag::ab), bd({k, n}, dt::s8, tag::ba), cd({m, n}, dt::s32, tag::ab);
        prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
        a = dnnl::memory(ad, eng, x);
        b = dnnl::memory(bd, eng, w);
        c = dnnl::memory(cd, eng, out);
    }
    void run() {
        prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
        strm.wait();
    }
};

// args: m, n, k.
void BM_LinearInt8(benchmark::State& state) {
    const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
    ThreadPool pool(kThreads);
    std::vector<float> x(size_t(m * k)), out(size_t(m * n)), out_bf16(size_t(m * n)), ws(size_t(n), 0.01f);
    fill_pattern<float>(
        x, [](float v) { return v; }, 3);
    const bool decode = m <= 8;
    const int64_t wbytes = n * k + n * 4;                        // int8 weights + f32 scales
    const int64_t copies = decode ? cold_copies(n * k * 2) : 1;  // cold for the bf16 copies too
    std::vector<int8_t> w(size_t(copies * n * k));
    std::vector<uint16_t> wb(size_t(copies * n * k));
    fill_pattern(w, make_i8, 1);
    fill_pattern(wb, make_bf16, 2);
    std::vector<int8_t> xq(decode ? 0 : size_t(m * k), 3);
    std::vector<int32_t> out_dnnl(decode ? 0 : size_t(m * n));
    std::unique_ptr<OneDnnMatmul> dnnl_mm;
    if (!decode) dnnl_mm = std::make_unique<OneDnnMatmul>(m, n, k, xq.data(), w.data(), out_dnnl.data());
    const auto* bytes = reinterpret_cast<const uint8_t*>(wb.data());
    volatile float sink = 0;
    kc::Int8Scratch scratch;
    int64_t c = 0;
    std::vector<double> t_i8, t_bf16, t_base;
    for (auto _ : state) {
        double t0 = now_s();
        kc::linear_int8(pool, x.data(), m, k, w.data() + c * n * k, ws.data(), n, out.data(), scratch);
        t_i8.push_back(now_s() - t0);
        const int64_t c2 = (c + copies / 2) % copies;
        t0 = now_s();
        kc::linear_bf16(pool, x.data(), m, k, wb.data() + c2 * n * k, n, out_bf16.data());
        t_bf16.push_back(now_s() - t0);
        t0 = now_s();
        if (decode) {
            sink = sink + stream_read(pool, bytes + ((c + copies / 4) % copies) * n * k * 2, wbytes);
        } else {
            dnnl_mm->run();
        }
        t_base.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        c = (c + 1) % copies;
    }
    const double ti = median(t_i8), tb = median(t_bf16), tbase = median(t_base);
    const double flop = 2.0 * double(m * n * k);
    if (decode) {
        state.counters["int8_GBps"] = double(wbytes) / ti / 1e9;
        state.counters["stream_GBps"] = double(wbytes) / tbase / 1e9;
        state.counters["ratio_vs_stream"] = tbase / ti;
        state.counters["bf16_GBps"] = double(n * k * 2) / tb / 1e9;
        state.counters["speedup_vs_bf16"] = tb / ti;
    } else {
        state.counters["int8_GFLOPS"] = flop / ti / 1e9;
        state.counters["bf16_GFLOPS"] = flop / tb / 1e9;
        state.counters["onednn_s8_GFLOPS"] = flop / tbase / 1e9;
        state.counters["ratio_vs_bf16"] = tb / ti;
        state.counters["ratio_vs_onednn"] = tbase / ti;
    }
}

void shapes(benchmark::internal::Benchmark* b) {
    const std::vector<std::pair<int64_t, int64_t>> nk = {{2048, 1024}, {512, 1024}, {1024, 2048},
                                                         {768, 1024},  {1024, 384}, {151936, 1024}};
    for (int64_t m : {1, 4, 128, 512}) {
        for (auto [n, k] : nk) {
            if (n > 100000 && m > 1) continue;
            b->Args({m, n, k});
        }
    }
    // DeepSeek-V3's real dense-layer decode shapes (benchmarks/dsv3_real_dims.sh): gate|up
    // (k = 7168) and down (k = 18432).
    b->Args({1, 36864, 7168});
    b->Args({1, 7168, 18432});
    b->ArgNames({"m", "n", "k"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_LinearInt8)->Apply(shapes);

// Bench-model MoE layer: 64 experts, hidden 1024, moe_intermediate 384, top-8; int8 vs bf16.
void BM_MoeInt8(benchmark::State& state) {
    const int64_t tokens = state.range(0), e = 64, h = 1024, inter = 384;
    const int k = 8;
    ThreadPool pool(kThreads);
    const int64_t per_expert = 3 * inter * h;
    const bool decode = tokens == 1;
    // Decode cycles over copies of the layer so weights come from DRAM.
    const int64_t copies = decode ? cold_copies(e * per_expert * 2) : 1;
    std::vector<int8_t> w8(size_t(copies * e * per_expert));
    std::vector<uint16_t> wb(size_t(copies * e * per_expert));
    fill_pattern(w8, make_i8, 1);
    fill_pattern(wb, make_bf16, 2);
    std::vector<float> gus(size_t(e * 2 * inter), 0.001f), ds(size_t(e * h), 0.001f);
    std::vector<float> x(size_t(tokens * h)), out(x.size());
    fill_pattern<float>(
        x, [](float v) { return v; }, 3);
    std::vector<int32_t> ids(size_t(tokens * k));
    std::vector<float> tw(ids.size(), 0.125f);
    std::mt19937 rng(5);
    std::vector<int32_t> perm(static_cast<size_t>(e));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t t = 0; t < tokens; ++t) {
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int j = 0; j < k; ++j) ids[size_t(t * k + j)] = perm[size_t(j)];
    }
    kc::MoeScratch s8, sb;
    kc::MoeInt8Scratch q;
    int64_t c = 0;
    std::vector<double> t8, tb;
    for (auto _ : state) {
        const int8_t* base8 = w8.data() + c * e * per_expert;
        const uint16_t* baseb = wb.data() + ((c + copies / 2) % copies) * e * per_expert;
        moeserve::kernels::MoeExpertsInt8 ex8{base8, gus.data(), base8 + e * 2 * inter * h, ds.data(), e, 0, h, inter};
        moeserve::kernels::MoeExpertsBf16 exb{baseb, baseb + e * 2 * inter * h, e, 0, h, inter};
        double t0 = now_s();
        kc::moe_experts_int8(pool, x.data(), tokens, ids.data(), tw.data(), k, ex8, s8, q, out.data());
        t8.push_back(now_s() - t0);
        t0 = now_s();
        kc::moe_experts_bf16(pool, x.data(), tokens, ids.data(), tw.data(), k, exb, sb, out.data());
        tb.push_back(now_s() - t0);
        c = (c + 1) % copies;
    }
    const double ti = median(t8), tbf = median(tb);
    if (decode) {
        const double bytes8 = double(k * per_expert), bytesb = 2.0 * bytes8;
        state.counters["int8_GBps"] = bytes8 / ti / 1e9;
        state.counters["bf16_GBps"] = bytesb / tbf / 1e9;
    } else {
        const double flop = 2.0 * double(tokens * k * per_expert);
        state.counters["int8_GFLOPS"] = flop / ti / 1e9;
        state.counters["bf16_GFLOPS"] = flop / tbf / 1e9;
    }
    state.counters["int8_us"] = ti * 1e6;
    state.counters["bf16_us"] = tbf * 1e6;
    state.counters["speedup_vs_bf16"] = tbf / ti;
}
BENCHMARK(BM_MoeInt8)->Arg(1)->Arg(128)->Arg(512)->ArgName("tokens")->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("kernel_threads", std::to_string(kThreads));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
