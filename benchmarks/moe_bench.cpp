// moe_experts_bf16 on the bench model (64 experts, top-8, hidden 1024, moe_intermediate_size 384),
// 2 threads. Decode (1 token) reports GB/s of expert weights read against a STREAM-style read of
// the same byte count; prefill (128, 512 tokens) reports GFLOP/s against OpenBLAS cblas_sgemm
// running the same per-expert matmuls (f32 weights, 2 threads), both measured in this process.
// All figures are medians over calls. MoeExchange: one layer's dispatch + combine of the bench
// shapes on a one-rank group (SelfComm copies), i.e. the exchange's own per-layer work and
// allocations without the network; compare builds by its Time (no baseline in the same run).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <random>
#include <vector>

#include "bench_baselines.h"
#include "moeserve/core/dtype.h"
#include "moeserve/kernels/cpu/bf16_panels.h"
#include "moeserve/kernels/cpu/moe_experts.h"
#include "moeserve/parallel/moe_exchange.h"

namespace {

using moeserve::ThreadPool;
using namespace moeserve::bench;
namespace kc = moeserve::kernels::cpu;

constexpr int kThreads = 2;
constexpr int64_t kExperts = 64, kTopK = 8, kHidden = 1024, kInter = 384;
constexpr int64_t kExpertElems = 3 * kInter * kHidden;  // gate|up + down

struct Routing {
    std::vector<int32_t> ids;
    std::vector<float> weights;
    int64_t distinct = 0;
};

Routing make_routing(int64_t tokens, std::mt19937& rng) {
    Routing r;
    std::vector<int32_t> perm(kExperts);
    std::iota(perm.begin(), perm.end(), 0);
    std::vector<char> used(kExperts, 0);
    for (int64_t t = 0; t < tokens; ++t) {
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int j = 0; j < kTopK; ++j) {
            r.ids.push_back(perm[size_t(j)]);
            r.weights.push_back(1.0f / kTopK);
            used[size_t(perm[size_t(j)])] = 1;
        }
    }
    r.distinct = std::accumulate(used.begin(), used.end(), int64_t{0});
    return r;
}

// One set of expert weights: gate_up [E, 2I, H] then down [E, H, I], bf16; with repack(), also
// each copy repacked into panels the way Experts::pack_for_kernels lays them out (bf16_panels.h).
struct ExpertSet {
    std::vector<uint16_t> w;
    std::unique_ptr<uint16_t, decltype(&std::free)> packed{nullptr, &std::free};
    static constexpr int64_t kGateElems = kInter * kHidden, kDownElems = kHidden * kInter;  // multiples of 32 rows

    void repack(int64_t copies) {
        ThreadPool load(1);
        packed.reset(static_cast<uint16_t*>(std::aligned_alloc(64, size_t(copies * kExperts * kExpertElems * 2))));
        for (int64_t c = 0; c < copies; ++c) {
            const uint16_t* src = w.data() + c * kExperts * kExpertElems;
            uint16_t* dst = packed.get() + c * kExperts * kExpertElems;
            for (int64_t half = 0; half < 2 * kExperts; ++half) {
                kc::pack_bf16_panels(load, src + half * kGateElems, kHidden, kInter, kHidden, dst + half * kGateElems);
            }
            for (int64_t e = 0; e < kExperts; ++e) {
                const int64_t down = kExperts * 2 * kGateElems + e * kDownElems;
                kc::pack_bf16_panels(load, src + down, kInter, kHidden, kInter, dst + down);
            }
        }
    }
    moeserve::kernels::MoeExpertsBf16 view(int64_t copy) const {
        const uint16_t* base = (packed ? packed.get() : w.data()) + copy * kExperts * kExpertElems;
        moeserve::kernels::MoeExpertsBf16 v{base, base + kExperts * 2 * kInter * kHidden, kExperts, 0, kHidden, kInter};
        v.panels = packed != nullptr;
        return v;
    }
};

// range(0): 1 = the weights repacked into panels (the avx512 default), 0 = the stored rows.
void BM_MoeDecode(benchmark::State& state) {
    ThreadPool pool(kThreads);
    const int64_t set_bytes = kExperts * kExpertElems * 2;
    const int64_t copies = cold_copies(set_bytes);
    ExpertSet ex;
    ex.w.resize(size_t(copies * kExperts * kExpertElems));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-0.05f, 0.05f);
    for (size_t i = 0; i < (1 << 20); ++i) ex.w[i] = moeserve::f32_to_bf16(d(rng));
    for (size_t i = 1 << 20; i < ex.w.size(); ++i) ex.w[i] = ex.w[i - (1 << 20)];
    if (state.range(0) == 1) ex.repack(copies);
    std::vector<Routing> routes;
    for (int i = 0; i < 64; ++i) routes.push_back(make_routing(1, rng));
    const int64_t bytes_per_call = kTopK * kExpertElems * 2;
    // Ours and the STREAM read alternate call by call (medians of each); the read walks the
    // copies half a cycle away from ours, 8 chunks of bytes_per_call per copy.
    const auto* bytes = reinterpret_cast<const uint8_t*>(ex.w.data());
    volatile float sink = 0;

    std::vector<float> x(kHidden, 0.1f), out(kHidden);
    kc::MoeScratch scratch;
    int64_t it = 0;
    std::vector<double> times, base_times;
    for (auto _ : state) {
        const Routing& r = routes[size_t(it % 64)];
        double t0 = now_s();
        kc::moe_experts_bf16(pool, x.data(), 1, r.ids.data(), r.weights.data(), kTopK, ex.view(it % copies), scratch,
                             out.data());
        times.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        const int64_t chunk = ((it % copies + copies / 2) % copies) * set_bytes + (it / copies % 8) * bytes_per_call;
        t0 = now_s();
        sink = sink + stream_read(pool, bytes + chunk, bytes_per_call);
        base_times.push_back(now_s() - t0);
        ++it;
    }
    const double gbps = double(bytes_per_call) / median(times) / 1e9;
    const double stream = double(bytes_per_call) / median(base_times) / 1e9;
    state.counters["GBps"] = gbps;
    state.counters["stream_GBps"] = stream;
    state.counters["ratio_vs_stream"] = gbps / stream;
}

// OpenBLAS doing the same grouped work: per expert, gate_up and down sgemms on its tokens.
double openblas_grouped_seconds(const std::vector<float>& wf, const Routing& r, int64_t tokens, int reps) {
    std::vector<int64_t> count(kExperts, 0);
    for (int32_t e : r.ids) count[size_t(e)]++;
    const int64_t total_rows = tokens * kTopK;
    std::vector<float> xs(size_t(total_rows * kHidden), 0.1f), gu(size_t(total_rows * 2 * kInter), 0.1f);
    std::vector<float> dn(size_t(total_rows * kHidden));
    std::vector<double> times;
    for (int rep = 0; rep < reps; ++rep) {
        const double t0 = now_s();
        int64_t off = 0;
        for (int64_t e = 0; e < kExperts; ++e) {
            const int64_t c = count[size_t(e)];
            if (c == 0) continue;
            const float* wgu = wf.data() + e * 2 * kInter * kHidden;
            const float* wd = wf.data() + kExperts * 2 * kInter * kHidden + e * kHidden * kInter;
            sgemm_seconds(xs.data() + off * kHidden, c, kHidden, wgu, 2 * kInter, gu.data() + off * 2 * kInter, 1);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(c), int(kHidden), int(kInter), 1.0f,
                        gu.data() + off * 2 * kInter, int(2 * kInter), wd, int(kInter), 0.0f, dn.data() + off * kHidden,
                        int(kHidden));
            off += c;
        }
        times.push_back(now_s() - t0);
    }
    return median(times);
}

// range(0): tokens; range(1): 1 = the weights repacked into panels, 0 = the stored rows.
void BM_MoePrefill(benchmark::State& state) {
    const int64_t tokens = state.range(0);
    ThreadPool pool(kThreads);
    ExpertSet ex;
    ex.w.resize(size_t(kExperts * kExpertElems));
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> d(-0.05f, 0.05f);
    for (auto& v : ex.w) v = moeserve::f32_to_bf16(d(rng));
    const Routing r = make_routing(tokens, rng);
    const double flops = 2.0 * double(tokens * kTopK) * double(kExpertElems);
    std::vector<float> wf(ex.w.size());
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = moeserve::bf16_to_f32(ex.w[i]);
    if (state.range(1) == 1) ex.repack(1);

    std::vector<float> x(size_t(tokens * kHidden), 0.1f), out(x.size());
    kc::MoeScratch scratch;
    std::vector<double> times, base_times;
    for (auto _ : state) {  // ours and OpenBLAS alternate; medians of each
        const double t0 = now_s();
        kc::moe_experts_bf16(pool, x.data(), tokens, r.ids.data(), r.weights.data(), kTopK, ex.view(0), scratch,
                             out.data());
        times.push_back(now_s() - t0);
        benchmark::DoNotOptimize(out.data());
        base_times.push_back(openblas_grouped_seconds(wf, r, tokens, 1));
    }
    const double gflops = flops / median(times) / 1e9;
    const double blas = flops / median(base_times) / 1e9;
    state.counters["GFLOPS"] = gflops;
    state.counters["openblas_GFLOPS"] = blas;
    state.counters["ratio_vs_openblas"] = gflops / blas;
}

// One rank: every collective is a copy (what a group of one does), so only MoeExchange's own work
// is timed.
class SelfComm final : public moeserve::parallel::Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const std::string& name() const override { return name_; }
    std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1000); }
    void all_reduce_sum(std::span<float>) override {}
    void all_reduce_sum(std::span<int64_t>) override {}
    void all_reduce_max(std::span<int64_t>) override {}
    void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override { copy(in, out); }
    void all_gather_v_bytes(std::span<const std::byte> in, const std::vector<size_t>&,
                            std::span<std::byte> out) override {
        copy(in, out);
    }
    void all_to_all_v_bytes(std::span<const std::byte> in, const std::vector<size_t>&, std::span<std::byte> out,
                            const std::vector<size_t>&) override {
        copy(in, out);
    }
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
        std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(out.size()), out.begin());
    }
    void broadcast_bytes(std::span<std::byte>, int) override {}
    void barrier() override {}

private:
    static void copy(std::span<const std::byte> in, std::span<std::byte> out) {
        if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());
    }
    std::string name_ = "self";
};

// range(0): 0 = all-to-all, 1 = padded all-gather; range(1): tokens.
void BM_MoeExchange(benchmark::State& state) {
    const auto kind = state.range(0) == 0 ? moeserve::parallel::MoeExchangeKind::kAllToAll
                                          : moeserve::parallel::MoeExchangeKind::kAllGather;
    const int64_t tokens = state.range(1);
    std::mt19937 rng(3);
    const Routing r = make_routing(tokens, rng);
    std::vector<float> x(size_t(tokens * kHidden), 0.1f), out(x.size());
    SelfComm comm;
    moeserve::parallel::MoeExchange ex;
    for (auto _ : state) {
        ex.dispatch(comm, kind, {x.data(), r.ids.data(), r.weights.data(), tokens, kHidden, int(kTopK)}, kExperts);
        std::memcpy(ex.local_out(), ex.local_x(), size_t(ex.num_local() * kHidden) * sizeof(float));
        ex.combine(comm, out.data());
        benchmark::DoNotOptimize(out.data());
    }
}

BENCHMARK(BM_MoeDecode)->Arg(0)->Arg(1)->ArgName("panels")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MoePrefill)
    ->ArgsProduct({{8, 32, 128, 512}, {0, 1}})
    ->ArgNames({"tokens", "panels"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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
BENCHMARK(BM_MoeExchange)
    ->Args({0, 1})
    ->Args({0, 64})
    ->Args({1, 512})
    ->ArgNames({"all_gather", "tokens"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
