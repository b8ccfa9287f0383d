// The desync guard's own work per collective (parallel/guarded_comm.h): the same collective on a
// one-rank LocalComm with and without the guard, at the sizes a decode step of the bench-size
// Qwen3-MoE moves over an EP group (12 layers x 3 all-to-all-v per step, plus the DP vote
// all-gather), and at a prefill's. The plain one is the baseline; the difference is what the guard
// adds to each collective before the network is involved.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <vector>

#include "moeserve/parallel/guarded_comm.h"
#include "moeserve/parallel/local_comm.h"

namespace {

using namespace moeserve::parallel;

std::unique_ptr<Communicator> make_comm(LocalCommGroup& group, bool guarded) {
    auto c = group.communicator(0);
    return guarded ? make_guarded_communicator(std::move(c)) : std::move(c);
}

// One MoE exchange's row all-to-all-v: rows of hidden 1024 + 2 x top-8 floats.
void BM_AllToAllRows(benchmark::State& state) {
    const auto rows = static_cast<size_t>(state.range(0));
    LocalCommGroup group(1, std::chrono::milliseconds(10000), "bench");
    auto comm = make_comm(group, state.range(1) != 0);
    const size_t bytes = rows * (1024 + 16) * sizeof(float);
    std::vector<std::byte> in(bytes), out(bytes);
    const std::vector<size_t> counts{bytes};
    for (auto _ : state) {
        comm->begin_step();
        comm->all_to_all_v_bytes(in, counts, out, counts);
        benchmark::DoNotOptimize(out.data());
    }
    state.SetLabel(state.range(1) != 0 ? "guarded" : "plain");
}
BENCHMARK(BM_AllToAllRows)->ArgsProduct({{4, 64, 1024}, {0, 1}});

// The DP vote: an all-gather of 7 int64 per rank.
void BM_DpVoteGather(benchmark::State& state) {
    LocalCommGroup group(1, std::chrono::milliseconds(10000), "bench");
    auto comm = make_comm(group, state.range(0) != 0);
    std::vector<int64_t> in(7, 1), out(7);
    for (auto _ : state) {
        comm->begin_step();
        comm->all_gather<int64_t>(in, out);
        benchmark::DoNotOptimize(out.data());
    }
    state.SetLabel(state.range(0) != 0 ? "guarded" : "plain");
}
BENCHMARK(BM_DpVoteGather)->Arg(0)->Arg(1);

// A TP all-reduce of the hidden states of `tokens` tokens.
void BM_AllReduceHidden(benchmark::State& state) {
    LocalCommGroup group(1, std::chrono::milliseconds(10000), "bench");
    auto comm = make_comm(group, state.range(1) != 0);
    std::vector<float> v(static_cast<size_t>(state.range(0)) * 1024, 1.0f);
    for (auto _ : state) {
        comm->begin_step();
        comm->all_reduce_sum(std::span<float>(v));
        benchmark::DoNotOptimize(v.data());
    }
    state.SetLabel(state.range(1) != 0 ? "guarded" : "plain");
}
BENCHMARK(BM_AllReduceHidden)->ArgsProduct({{2, 512}, {0, 1}});

}  // namespace

BENCHMARK_MAIN();
