// vLLM's periodic stats line (its LoggingStatLogger's figures, in our words), one per engine every
// interval: prompt and generation throughput over the interval, running and waiting requests, KV
// cache usage, prefix-cache hit rate, and with speculative decoding the draft acceptance rate and
// mean acceptance length over the interval. On by default as in vLLM; --disable-log-stats turns it off;
// env VLLM_LOG_STATS_INTERVAL sets the interval (seconds, default 10). An idle engine's line
// (no tokens in this interval nor the one before) goes out at debug level, as vLLM keeps an idle
// server's log quiet. Depends on ipc (the engines' Stats) only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moeserve/ipc/messages.h"

namespace moeserve::serve {

struct StatsLine {
    std::string text;
    bool idle = false;  // nothing computed in this interval nor the previous one
};

class StatsLog {
public:
    // The interval in seconds: VLLM_LOG_STATS_INTERVAL when set (> 0), else 10. Error
    // kInvalidArgument naming the variable when it is not a positive number.
    static double interval_from_env();

    // start_s: when the engines started (their counters were zero then), on the clock of lines().
    explicit StatsLog(double start_s) : start_s_(start_s) {}

    // The lines for `engines` at time now_s (seconds): throughput since the previous call, or
    // since start_s for an engine not seen before.
    std::vector<StatsLine> lines(const std::vector<ipc::Stats>& engines, double now_s);

private:
    struct Last {
        double time_s = 0;
        int64_t prompt_tokens = 0, generation_tokens = 0;
        int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;  // speculative decoding
        bool active = true;                                         // the previous interval computed something
    };
    double start_s_;
    std::map<int32_t, Last> last_;  // by engine index
};

}  // namespace moeserve::serve
