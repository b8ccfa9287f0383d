// vLLM's periodic stats line (issue 34): throughput over the interval, running/waiting, KV usage,
// prefix-cache hit rate; an idle engine's line is marked idle (logged at debug).
#include "moeserve/serve/stats_log.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "moeserve/core/error.h"

namespace moeserve::serve {
namespace {

ipc::Stats stats(int64_t prompt, int64_t generation, int running, int waiting) {
    ipc::Stats s;
    s.engine_index = 1;
    s.num_prompt_tokens = prompt;
    s.num_generation_tokens = generation;
    s.num_running = running;
    s.num_waiting = waiting;
    s.kv_cache_usage = 0.25f;
    s.prefix_cache_queries = 200;
    s.prefix_cache_hits = 50;
    return s;
}

TEST(StatsLogTest, ThroughputOverTheIntervalAndTheGauges) {
    StatsLog log(5.0);  // the engines started at 5 s with zero counters
    EXPECT_EQ(log.lines({stats(100, 10, 0, 0)}, 10.0).at(0).text.substr(0, 58),
              "Engine 001: Avg prompt throughput: 20.0 tokens/s, Avg gene");
    const auto lines = log.lines({stats(300, 60, 2, 1)}, 20.0);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].text,
              "Engine 001: Avg prompt throughput: 20.0 tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 2 "
              "reqs, Waiting: 1 reqs, KV cache usage: 25.0%, Prefix cache hit rate: 25.0%");
    EXPECT_FALSE(lines[0].idle);
}

TEST(StatsLogTest, DraftAcceptanceOverTheInterval) {
    StatsLog log(0);
    ipc::Stats s = stats(100, 10, 1, 0);
    s.spec_num_drafts = 10;
    s.spec_num_draft_tokens = 30;
    s.spec_num_accepted_tokens = 15;
    EXPECT_NE(log.lines({s}, 10).at(0).text.find(
                  ", Draft acceptance rate: 50.0% (15 of 30 drafted tokens), Mean acceptance length: 2.50"),
              std::string::npos);
    s.spec_num_drafts = 20;
    s.spec_num_draft_tokens = 70;
    s.spec_num_accepted_tokens = 25;  // this interval: 10 of 40 over 10 drafts
    EXPECT_NE(log.lines({s}, 20).at(0).text.find(
                  ", Draft acceptance rate: 25.0% (10 of 40 drafted tokens), Mean acceptance length: 2.00"),
              std::string::npos);
    EXPECT_EQ(log.lines({s}, 30).at(0).text.find("Draft"), std::string::npos);  // none in this interval
}

TEST(StatsLogTest, IdleAfterAQuietIntervalFollowingAnotherQuietOne) {
    StatsLog log(0);
    EXPECT_TRUE(log.lines({stats(0, 0, 0, 0)}, 1).at(0).idle == false);  // nothing before the start: not idle yet
    EXPECT_FALSE(log.lines({stats(10, 1, 0, 0)}, 10).at(0).idle);        // work in this interval
    EXPECT_FALSE(log.lines({stats(10, 1, 0, 0)}, 20).at(0).idle);        // work in the one before
    EXPECT_TRUE(log.lines({stats(10, 1, 0, 0)}, 30).at(0).idle);
    EXPECT_FALSE(log.lines({stats(10, 1, 1, 0)}, 40).at(0).idle);  // a running request is not idle
}

TEST(StatsLogTest, IntervalFromEnvironment) {
    unsetenv("VLLM_LOG_STATS_INTERVAL");
    EXPECT_EQ(StatsLog::interval_from_env(), 10.0);
    setenv("VLLM_LOG_STATS_INTERVAL", "0.5", 1);
    EXPECT_EQ(StatsLog::interval_from_env(), 0.5);
    for (const char* bad : {"0", "-1", "soon"}) {
        setenv("VLLM_LOG_STATS_INTERVAL", bad, 1);
        EXPECT_THROW(StatsLog::interval_from_env(), Error) << bad;
    }
    unsetenv("VLLM_LOG_STATS_INTERVAL");
}

}  // namespace
}  // namespace moeserve::serve
