// int4 kernels, W4A16 (f32 activations) and W4A8 (int8 activations), against W8A8 int8 on the
// bench model's shapes, 2 threads, alternating call by call (medians; the cores are shared), each
// against a STREAM-style read of the same bytes:
//   decode (m = 1): GB/s of weights + scales (int4: codes + f32 scale and zero per group of 128;
//     int8: weights + one f32 scale per row), and the time ratios int8 / int4;
//   prefill (m = 128): GFLOP/s (2 m n k) of all three;
//   MoE decode / prefill on the bench experts (64 x [768|384, 1024], top-8).
// Decode cycles over enough copies of the weights that they come from DRAM (kColdBytes).
#include <benchmark/benchmark.h>

#include <numeric>
#include <random>
#include <vector>

#include "bench_baselines.h"
#include "moeserve/kernels/cpu/linear_int4.h"
#include "moeserve/kernels/cpu/linear_int8.h"
#include "moeserve/kernels/cpu/moe_experts_int4.h"
#include "moeserve/kernels/cpu/moe_experts_int8.h"

namespace {

using moeserve::ThreadPool;
using namespace moeserve::bench;
namespace kc = moeserve::kernels::cpu;

constexpr int kThreads = 2;
constexpr int64_t kGroup = 128;

// `copies` copies of an int4 matrix [n, k]: random codes, scales 0.01, zeros 8.
struct Int4Copies {
    std::vector<uint8_t> codes;
    std::vector<float> scale, zero;
    int64_t n, k, copies;
    Int4Copies(int64_t n_, int64_t k_, int64_t copies_) : n(n_), k(k_), copies(copies_) {
        std::mt19937 rng(1);
        codes.resize(size_t(copies * n * k / 2));
        for (auto& c : codes) c = static_cast<uint8_t>(rng());
        scale.assign(size_t(copies * n * moeserve::kernels::int4_groups(k, kGroup)), 0.01f);
        zero.assign(scale.size(), 8.0f);
    }
    moeserve::kernels::Int4Weights at(int64_t c, bool int8_activations = false) const {
        const int64_t g = moeserve::kernels::int4_groups(k, kGroup);
        return {codes.data() + c * n * k / 2,
                scale.data() + c * n * g,
                zero.data() + c * n * g,
                n,
                k,
                kGroup,
                int8_activations};
    }
    int64_t bytes() const { return n * k / 2 + 8 * n * moeserve::kernels::int4_groups(k, kGroup); }
};

// args: m, n, k.
void BM_LinearInt4(benchmark::State& state) {
    const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
    ThreadPool pool(kThreads);
    const bool decode = m <= 8;
    const int64_t copies = decode ? cold_copies(n * k) : 1;  // cold for the int8 copies (the larger)
    const Int4Copies w4(n, k, copies);
    std::vector<int8_t> w8(size_t(copies * n * k), 3);
    std::vector<float> ws(size_t(n), 0.01f), x(size_t(m * k), 0.5f), out(size_t(m * n));
    const int64_t bytes8 = n * k + 4 * n;
    kc::Int8Scratch scratch;
    volatile float sink = 0;
    std::vector<double> t4, t48, t8, ts;
    int64_t c = 0;
    for (auto _ : state) {
        double t0 = now_s();
        kc::linear_int4(pool, x.data(), m, w4.at(c), out.data());
        t4.push_back(now_s() - t0);
        t0 = now_s();
        kc::linear_int4(pool, x.data(), m, w4.at((c + copies / 3) % copies, true), out.data());
        t48.push_back(now_s() - t0);
        const int64_t c2 = (c + copies / 2) % copies;
        t0 = now_s();
        kc::linear_int8(pool, x.data(), m, k, w8.data() + c2 * n * k, ws.data(), n, out.data(), scratch);
        t8.push_back(now_s() - t0);
        t0 = now_s();
        sink =
            sink + stream_read(pool, reinterpret_cast<const uint8_t*>(w8.data()) + ((c + copies / 4) % copies) * n * k,
                               w4.bytes());
        ts.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        c = (c + 1) % copies;
    }
    const double a = median(t4), a8 = median(t48), b = median(t8), s = median(ts);
    if (decode) {
        state.counters["int4_GBps"] = double(w4.bytes()) / a / 1e9;
        state.counters["w4a8_GBps"] = double(w4.bytes()) / a8 / 1e9;
        state.counters["int8_GBps"] = double(bytes8) / b / 1e9;
        state.counters["stream_GBps"] = double(w4.bytes()) / s / 1e9;
    } else {
        const double flop = 2.0 * double(m * n * k);
        state.counters["int4_GFLOPS"] = flop / a / 1e9;
        state.counters["w4a8_GFLOPS"] = flop / a8 / 1e9;
        state.counters["int8_GFLOPS"] = flop / b / 1e9;
    }
    state.counters["int4_us"] = a * 1e6;
    state.counters["w4a8_us"] = a8 * 1e6;
    state.counters["int8_us"] = b * 1e6;
    state.counters["speedup_vs_int8"] = b / a;
    state.counters["w4a8_speedup_vs_int8"] = b / a8;
}

void shapes(benchmark::internal::Benchmark* b) {
    for (int64_t m : {1, 128}) {
        for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{2048, 1024}, {1024, 2048}, {768, 1024}}) {
            b->Args({m, n, k});
        }
    }
    b->ArgNames({"m", "n", "k"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_LinearInt4)->Apply(shapes);

// Bench-model MoE layer: 64 experts, hidden 1024, moe_intermediate 384, top-8; int4 vs int8.
void BM_MoeInt4(benchmark::State& state) {
    const int64_t tokens = state.range(0), e = 64, h = 1024, inter = 384;
    const int k = 8;
    ThreadPool pool(kThreads);
    const int64_t per_expert = 3 * inter * h;
    const bool decode = tokens == 1;
    const int64_t copies = decode ? cold_copies(e * per_expert) : 1;
    const Int4Copies gu(copies * e * 2 * inter, h, 1), down(copies * e * h, inter, 1);
    std::vector<int8_t> w8(size_t(copies * e * per_expert), 3);
    std::vector<float> gus(size_t(e * 2 * inter), 0.001f), ds(size_t(e * h), 0.001f);
    std::vector<float> x(size_t(tokens * h), 0.5f), out(x.size());
    std::vector<int32_t> ids(size_t(tokens * k));
    std::vector<float> tw(ids.size(), 0.125f);
    std::mt19937 rng(5);
    std::vector<int32_t> perm(static_cast<size_t>(e));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t t = 0; t < tokens; ++t) {
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int j = 0; j < k; ++j) ids[size_t(t * k + j)] = perm[size_t(j)];
    }
    kc::MoeScratch s4, s8;
    kc::MoeInt8Scratch q;
    int64_t c = 0;
    std::vector<double> t4, t48, t8;
    for (auto _ : state) {
        const moeserve::kernels::Int4Weights g = gu.at(0), d = down.at(0), g8 = gu.at(0, true), d8 = down.at(0, true);
        const moeserve::kernels::MoeExpertsInt4 ex4{
            g.rows(c * e * 2 * inter, e * 2 * inter), d.rows(c * e * h, e * h), e, 0, h, inter};
        const int64_t c3 = (c + copies / 3) % copies;
        const moeserve::kernels::MoeExpertsInt4 ex48{
            g8.rows(c3 * e * 2 * inter, e * 2 * inter), d8.rows(c3 * e * h, e * h), e, 0, h, inter};
        const int8_t* base8 = w8.data() + ((c + copies / 2) % copies) * e * per_expert;
        const moeserve::kernels::MoeExpertsInt8 ex8{base8, gus.data(), base8 + e * 2 * inter * h, ds.data(), e, 0,
                                                    h,     inter};
        double t0 = now_s();
        kc::moe_experts_int4(pool, x.data(), tokens, ids.data(), tw.data(), k, ex4, s4, out.data());
        t4.push_back(now_s() - t0);
        t0 = now_s();
        kc::moe_experts_int4(pool, x.data(), tokens, ids.data(), tw.data(), k, ex48, s4, out.data());
        t48.push_back(now_s() - t0);
        t0 = now_s();
        kc::moe_experts_int8(pool, x.data(), tokens, ids.data(), tw.data(), k, ex8, s8, q, out.data());
        t8.push_back(now_s() - t0);
        c = (c + 1) % copies;
    }
    const double a = median(t4), a8 = median(t48), b = median(t8);
    if (decode) {
        const double groups = 2.0 * inter * double(moeserve::kernels::int4_groups(h, kGroup)) +
                              double(h * moeserve::kernels::int4_groups(inter, kGroup));
        const double bytes4 = double(k * per_expert) / 2 + 8.0 * k * groups;
        state.counters["int4_GBps"] = bytes4 / a / 1e9;
        state.counters["w4a8_GBps"] = bytes4 / a8 / 1e9;
        state.counters["int8_GBps"] = double(k * per_expert) / b / 1e9;
    }
    state.counters["int4_us"] = a * 1e6;
    state.counters["w4a8_us"] = a8 * 1e6;
    state.counters["int8_us"] = b * 1e6;
    state.counters["speedup_vs_int8"] = b / a;
    state.counters["w4a8_speedup_vs_int8"] = b / a8;
}
BENCHMARK(BM_MoeInt4)->Arg(1)->Arg(128)->ArgName("tokens")->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
