// Measurement (disabled by default; run with --gtest_also_run_disabled_tests): the starvation
// guard's effect on decode TPOT and throughput on the tiny Qwen3-MoE under a steady stream of
// arrivals, one engine with PdHybridPolicy. The figures chose kDefaultMaxConsecutivePrefillSteps
// (docs/pd_hybrid.md). Asserts nothing about time.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "engine/engine_test_util.h"
#include "moeserve/engine/scheduler/policy_pd_hybrid.h"
#include "moeserve/model/registry.h"

namespace moeserve::engine {
namespace {

using namespace testing;
using Clock = std::chrono::steady_clock;

TEST(PdHybridMeasure, DISABLED_StarvationGuardTpot) {
    ThreadPool pool(2);
    auto model = model::load_model(MOESERVE_QWEN3_TINY_DIR, pool, model::LoadOptions{.max_model_len = 512});
    struct Run {
        double seconds = 0, tpot_mean = 0, tpot_max = 0;
        int steps = 0, max_gap_steps = 0, prefill_steps = 0;
        double ttft_steps = 0;  // mean steps from arrival to first token of the streamed prompts
        int64_t tokens = 0;
    };
    auto run_once = [&](int32_t bound) {
        EngineConfig c;
        c.max_num_seqs = 64;
        c.max_num_batched_tokens = 64;  // a 96-token prompt takes two prefill steps
        c.max_model_len = 512;
        c.block_size = 16;
        c.num_blocks = 1024;
        c.enable_prefix_caching = false;
        EngineCore engine(*model, pool, c, std::make_unique<PdHybridPolicy>(bound));
        Rng rng(3);
        auto prompt = [&](int len) {
            std::vector<int32_t> p;
            for (int k = 0; k < len; ++k) p.push_back(static_cast<int32_t>(rng.next_u64() % 150000));
            return p;
        };
        // 8 long decodes from the start; then a 96-token prompt (4 output tokens) every 2 steps.
        for (int i = 0; i < 8; ++i) engine.add_request(greedy_add("long" + std::to_string(i), prompt(16), 64));
        std::map<std::string, std::pair<Clock::time_point, int>> last;
        std::vector<double> itl;  // seconds between tokens of the long requests
        Run run;
        int arrived = 0;
        std::map<std::string, int> arrival;
        const auto t0 = Clock::now();
        for (int s = 0; engine.has_unfinished_requests(); ++s) {
            if (s % 2 == 1 && arrived < 60) {
                arrival["a" + std::to_string(arrived)] = s;
                engine.add_request(greedy_add("a" + std::to_string(arrived++), prompt(96), 4));
            }
            const StepOutcome step = engine.step();
            run.prefill_steps += step.phase == Phase::kPrefill;
            run.steps = s + 1;
            const auto now = Clock::now();
            for (const auto& o : step.outputs) {
                run.tokens += static_cast<int64_t>(o.new_token_ids.size());
                if (auto a = arrival.find(o.request_id); a != arrival.end()) {
                    run.ttft_steps += static_cast<double>(s - a->second + 1) / 60.0;
                    arrival.erase(a);
                }
                if (o.request_id.rfind("long", 0) != 0 || o.new_token_ids.empty()) continue;
                if (auto it = last.find(o.request_id); it != last.end()) {
                    itl.push_back(std::chrono::duration<double>(now - it->second.first).count());
                    run.max_gap_steps = std::max(run.max_gap_steps, s - it->second.second);
                }
                last[o.request_id] = {now, s};
            }
        }
        run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        for (double x : itl) {
            run.tpot_mean += x / static_cast<double>(itl.size());
            run.tpot_max = std::max(run.tpot_max, x);
        }
        return run;
    };
    for (int32_t bound : {0, 1, 2, 4, 8, 16}) {
        Run best;
        for (int rep = 0; rep < 3; ++rep) {  // the machine is shared: keep the fastest of 3
            const Run r = run_once(bound);
            if (rep == 0 || r.seconds < best.seconds) best = r;
        }
        std::printf(
            "[ figures  ] bound %2d: %d steps (%d prefill), long-request max gap %d steps, stream TTFT mean %.1f "
            "steps; best of 3: run "
            "%.3f s, %.0f output tok/s, long-request TPOT mean %.2f ms, max %.2f ms\n",
            bound, best.steps, best.prefill_steps, best.max_gap_steps, best.ttft_steps, best.seconds,
            static_cast<double>(best.tokens) / best.seconds, best.tpot_mean * 1e3, best.tpot_max * 1e3);
    }
}

}  // namespace
}  // namespace moeserve::engine
