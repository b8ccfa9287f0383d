// Sampler cost per engine step over a batch of rows of Qwen3's vocabulary (151936): greedy,
// temperature + top-k/top-p, penalties, and logprobs, on 1 and 2 threads. The baseline is one
// pass of reading the logits (argmax), the least any sampler must do.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "moeserve/engine/sampler.h"

namespace {

using namespace moeserve;
constexpr int64_t kVocab = 151936;  // Qwen3 / Qwen3-MoE

enum Mode { kGreedy, kTopP, kPenalties, kLogprobs };

void BM_Sampler(benchmark::State& state) {
    const auto batch = static_cast<size_t>(state.range(0));
    const auto mode = static_cast<Mode>(state.range(1));
    const auto threads = static_cast<int>(state.range(2));
    ThreadPool pool(threads);
    engine::Sampler sampler(kVocab, &pool);
    Rng rng(1);
    std::vector<float> logits(batch * kVocab);
    for (auto& x : logits) x = rng.normal() * 3.0f;
    std::vector<float> work(logits.size());
    std::vector<std::unique_ptr<engine::Request>> requests;
    std::vector<engine::Request*> req_ptrs;
    std::vector<float*> rows;
    for (size_t i = 0; i < batch; ++i) {
        ipc::SamplingParams p;
        p.stop_token_ids = {151645};  // the EOS, as ipc::validate_request adds it
        p.temperature = mode == kGreedy ? 0.0f : 0.7f;
        if (mode != kGreedy) {
            p.top_p = 0.9f;
            p.top_k = 50;
        }
        if (mode == kPenalties) {
            p.repetition_penalty = 1.1f;
            p.presence_penalty = 0.5f;
            p.frequency_penalty = 0.5f;
        }
        if (mode == kLogprobs) p.logprobs = 5;
        std::vector<int32_t> prompt(128);
        for (auto& t : prompt) t = static_cast<int32_t>(rng.next_u64() % kVocab);
        auto r = std::make_unique<engine::Request>("r", prompt, p, i, 0);
        for (int k = 0; k < 128; ++k) r->append_output(static_cast<int32_t>(rng.next_u64() % kVocab));
        req_ptrs.push_back(r.get());
        requests.push_back(std::move(r));
        rows.push_back(work.data() + i * kVocab);
    }
    for (auto _ : state) {
        state.PauseTiming();
        work = logits;
        state.ResumeTiming();
        benchmark::DoNotOptimize(sampler.sample(rows, req_ptrs));
    }
    state.counters["us_per_row"] = benchmark::Counter(
        static_cast<double>(batch) * 1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(batch));
}

void Args(benchmark::internal::Benchmark* b) {
    for (int mode : {kGreedy, kTopP, kPenalties, kLogprobs}) {
        for (int threads : {1, 2}) {
            for (int batch : {1, 8, 32, 64}) b->Args({batch, mode, threads});
        }
    }
    b->ArgNames({"batch", "mode", "threads"})->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_Sampler)->Apply(Args);

}  // namespace

BENCHMARK_MAIN();
