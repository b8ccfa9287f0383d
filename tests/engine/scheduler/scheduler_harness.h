// A scheduler over its own KV cache manager, stepped by hand: the "model" samples token 7 for
// every sequence that samples. Shared by the scheduler's tests.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/engine/scheduler/policy_mixed.h"
#include "moeserve/engine/scheduler/scheduler.h"

namespace moeserve::engine::testing {

using Progress = std::map<std::string, int32_t>;  // request id -> tokens this step

struct Harness {
    Harness(int32_t num_blocks, int32_t block_size, SchedulerConfig config, bool caching = true)
        : kv(num_blocks, block_size, caching), scheduler(config, kv, std::make_unique<MixedPolicy>()) {}

    // One step; returns {id -> tokens scheduled}, records the batch and outputs.
    Progress step(std::optional<Phase> forced = std::nullopt) {
        batch = scheduler.schedule(forced);
        StepResult result;
        Progress progress;
        for (const auto& s : batch.requests) {
            progress[s.request->request_id] = s.num_tokens;
            result.sampled.emplace_back();
            if (s.samples()) result.sampled.back().emplace().token_id = 7;
        }
        outputs = scheduler.update(batch, result);
        return progress;
    }
    FinishReason finish_of(const std::string& id) const {
        for (const auto& o : outputs) {
            if (o.request_id == id) return o.finish_reason;
        }
        return FinishReason::kNone;
    }

    KvCacheManager kv;
    Scheduler scheduler;
    ScheduledBatch batch;
    std::vector<ipc::RequestOutput> outputs;
};

inline SchedulerConfig config(int32_t max_seqs, int32_t max_tokens, int32_t max_len = 256) {
    SchedulerConfig c;
    c.max_num_seqs = max_seqs;
    c.max_num_batched_tokens = max_tokens;
    c.max_model_len = max_len;
    return c;
}

}  // namespace moeserve::engine::testing
