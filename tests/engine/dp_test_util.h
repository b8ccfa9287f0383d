// Test helpers for the DP step protocol: DP ranks as threads over LocalComm, each with its own
// EngineCore and DpCoordinator, fed from a per-rank arrival schedule keyed by round (rounds are
// in lock-step, so the schedule means the same on every rank).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_test_util.h"
#include "moeserve/engine/dp_coordinator.h"
#include "moeserve/engine/scheduler/policy_pd_hybrid.h"
#include "moeserve/parallel/groups.h"

namespace moeserve::engine::testing {

using Arrivals = std::map<int64_t, std::vector<ipc::AddRequest>>;  // round -> requests added before it

struct RankRun {
    Collected collected;
    DpCounters counters;
    std::vector<TimelineEntry> timeline;
    ipc::Stats stats;
    int64_t rounds = 0;
    bool shutdown = false;
    int64_t ep_calls = 0;   // EP collectives the model ran (when it counts them)
    double ep_seconds = 0;  // time in them
    std::string error;      // what() of an exception the rank's loop threw
};

struct DpWorldSpec {
    parallel::ParallelSizes sizes;
    std::chrono::milliseconds timeout{20000};
    EngineConfig engine;
    DpCoordinatorOptions options;
    bool pd_hybrid = false;  // every EngineCore gets PdHybridPolicy (else MixedPolicy)
    int32_t max_consecutive_prefill_steps = kDefaultMaxConsecutivePrefillSteps;  // its guard
    // The model of a rank (its parallel context, for EP sharding) and its thread pool.
    std::function<std::unique_ptr<model::Model>(parallel::ParallelContext&, ThreadPool&)> make_model;
    std::function<void(int rank, DpCoordinatorOptions&)> tweak;      // per-rank option changes
    int64_t shutdown_rank = -1, shutdown_round = -1;                 // a rank that asks to stop
    std::function<void(int rank, model::Model&, RankRun&)> on_done;  // inspect the model at the end
};

// Runs every rank (one thread each, tp = 1) until the last arrival is in and no rank has work.
inline std::vector<RankRun> run_dp_world(const DpWorldSpec& spec, const std::vector<Arrivals>& arrivals) {
    MOESERVE_CHECK(spec.sizes.tp == 1 && static_cast<int>(arrivals.size()) == spec.sizes.dp, "one plan per DP rank");
    int64_t last_arrival = 0;
    for (const auto& a : arrivals) {
        if (!a.empty()) last_arrival = std::max(last_arrival, a.rbegin()->first);
    }
    parallel::LocalWorld world = parallel::make_local_world(spec.sizes, spec.timeout);
    std::vector<RankRun> runs(static_cast<size_t>(spec.sizes.dp));
    std::vector<std::thread> threads;
    for (int r = 0; r < spec.sizes.dp; ++r) {
        threads.emplace_back([&, r] {
            RankRun& run = runs[static_cast<size_t>(r)];
            try {
                ThreadPool pool(1);
                parallel::ParallelContext& ctx = world.ranks[static_cast<size_t>(r)];
                auto model = spec.make_model(ctx, pool);
                EngineConfig ec = spec.engine;
                ec.engine_index = r;
                std::unique_ptr<SchedulingPolicy> policy;
                if (spec.pd_hybrid) policy = std::make_unique<PdHybridPolicy>(spec.max_consecutive_prefill_steps);
                EngineCore core(*model, pool, ec, std::move(policy));
                DpCoordinatorOptions o = spec.options;
                o.record_timeline = true;
                if (spec.tweak) spec.tweak(r, o);
                DpCoordinator coord(core, *ctx.dp, o);
                Arrivals plan = arrivals[static_cast<size_t>(r)];
                for (int64_t round = 0;; ++round) {
                    if (auto it = plan.find(round); it != plan.end()) {
                        for (const auto& a : it->second) core.add_request(a);
                    }
                    if (r == spec.shutdown_rank && round == spec.shutdown_round) coord.request_shutdown();
                    DpStepResult res = coord.step();
                    for (auto& o2 : res.outputs) {
                        auto& t = run.collected.tokens[o2.request_id];
                        t.insert(t.end(), o2.new_token_ids.begin(), o2.new_token_ids.end());
                        if (o2.finish_reason != FinishReason::kNone) run.collected.last[o2.request_id] = o2;
                    }
                    run.rounds = round + 1;
                    if (res.shutdown) {
                        run.shutdown = true;
                        break;
                    }
                    if (round >= last_arrival && !coord.global_has_work()) break;
                    MOESERVE_CHECK(round < 20000, "the DP world does not finish");
                }
                run.counters = coord.counters();
                run.timeline = coord.timeline();
                run.stats = core.stats();
                if (spec.on_done) spec.on_done(r, *model, run);
            } catch (const std::exception& e) {
                run.error = e.what();
            }
        });
    }
    for (auto& t : threads) t.join();
    return runs;
}

}  // namespace moeserve::engine::testing
