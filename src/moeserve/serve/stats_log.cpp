#include "moeserve/serve/stats_log.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "moeserve/core/error.h"

namespace moeserve::serve {

double StatsLog::interval_from_env() {
    // env: VLLM_LOG_STATS_INTERVAL, seconds between stats lines (vLLM's variable; default 10).
    const char* text = std::getenv("VLLM_LOG_STATS_INTERVAL");
    if (text == nullptr || *text == '\0') return 10.0;
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (*end != '\0' || !(seconds > 0)) {
        raise(ErrorCode::kInvalidArgument, "VLLM_LOG_STATS_INTERVAL must be a number of seconds > 0; got '{}'", text);
    }
    return seconds;
}

namespace {

// ", Draft acceptance rate: R% (A of D drafted tokens), Mean acceptance length: L" over the
// interval (L = tokens per verify step, vLLM's 1 + accepted / drafts); "" without drafts.
std::string speculation(int64_t drafts, int64_t draft_tokens, int64_t accepted) {
    if (drafts <= 0 || draft_tokens <= 0) return "";
    return fmt::format(", Draft acceptance rate: {:.1f}% ({} of {} drafted tokens), Mean acceptance length: {:.2f}",
                       100.0 * static_cast<double>(accepted) / static_cast<double>(draft_tokens), accepted,
                       draft_tokens, 1.0 + static_cast<double>(accepted) / static_cast<double>(drafts));
}

}  // namespace

std::vector<StatsLine> StatsLog::lines(const std::vector<ipc::Stats>& engines, double now_s) {
    std::vector<StatsLine> out;
    for (const ipc::Stats& s : engines) {
        Last& last = last_.try_emplace(s.engine_index, Last{start_s_, 0, 0, 0, 0, 0, true}).first->second;
        const double seconds = now_s - last.time_s;
        if (seconds <= 0) continue;
        const int64_t prompt = s.num_prompt_tokens - last.prompt_tokens;
        const int64_t generation = s.num_generation_tokens - last.generation_tokens;
        const bool active = prompt != 0 || generation != 0 || s.num_running > 0 || s.num_waiting > 0;
        const double hit_rate = s.prefix_cache_queries > 0 ? 100.0 * static_cast<double>(s.prefix_cache_hits) /
                                                                 static_cast<double>(s.prefix_cache_queries)
                                                           : 0.0;
        out.push_back(
            {fmt::format("Engine {:03d}: Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} "
                         "tokens/s, Running: {} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit "
                         "rate: {:.1f}%{}",
                         s.engine_index, static_cast<double>(prompt) / seconds,
                         static_cast<double>(generation) / seconds, s.num_running, s.num_waiting,
                         100.0 * s.kv_cache_usage, hit_rate,
                         speculation(s.spec_num_drafts - last.drafts, s.spec_num_draft_tokens - last.draft_tokens,
                                     s.spec_num_accepted_tokens - last.accepted_tokens)),
             !active && !last.active});
        last = {now_s,
                s.num_prompt_tokens,
                s.num_generation_tokens,
                s.spec_num_drafts,
                s.spec_num_draft_tokens,
                s.spec_num_accepted_tokens,
                active};
    }
    return out;
}

}  // namespace moeserve::serve
