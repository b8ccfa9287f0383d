// The PD TTFT breakdown from two scrapes of the instances' /metrics (bench/pd_breakdown.h).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "moeserve/bench/pd_breakdown.h"

namespace moeserve::bench {
namespace {

TEST(PdBreakdownTest, MeansPerRequestOverTheRun) {
    const MetricsSample prefill_before = {
        {"vllm:request_queue_time_seconds_sum{model_name=\"m\"}", 1.0},
        {"vllm:request_queue_time_seconds_count{model_name=\"m\"}", 10},
        {"vllm:request_prefill_time_seconds_sum{model_name=\"m\"}", 2.0},
        {"vllm:request_prefill_time_seconds_count{model_name=\"m\"}", 10},
    };
    MetricsSample prefill_after = prefill_before;
    prefill_after["vllm:request_queue_time_seconds_sum{model_name=\"m\"}"] += 0.04;  // 4 requests, 10 ms each
    prefill_after["vllm:request_queue_time_seconds_count{model_name=\"m\"}"] += 4;
    prefill_after["vllm:request_prefill_time_seconds_sum{model_name=\"m\"}"] += 0.8;
    prefill_after["vllm:request_prefill_time_seconds_count{model_name=\"m\"}"] += 4;
    const MetricsSample decode_before = {
        {"moeserve:kv_transfers_total{engine=\"0\",role=\"producer\"}", 7},  // another role: not counted
        {"moeserve:kv_transfers_total{engine=\"0\",role=\"consumer\"}", 3},
    };
    MetricsSample decode_after = decode_before;
    for (const char* engine : {"0", "1"}) {  // two DP engines, two transfers each
        const std::string labels = fmt::format("{{engine=\"{}\",role=\"consumer\"}}", engine);
        decode_after["moeserve:kv_transfers_total" + labels] += 2;
        decode_after[fmt::format("moeserve:kv_wait_seconds_total{{engine=\"{}\"}}", engine)] += 0.3;
        decode_after["moeserve:kv_transfer_seconds_total" + labels] += 0.1;
        decode_after["moeserve:kv_transfer_bytes_total" + labels] += 2000;
    }
    decode_after["vllm:time_to_first_token_seconds_sum{model_name=\"m\"}"] = 0.8;
    decode_after["vllm:time_to_first_token_seconds_count{model_name=\"m\"}"] = 4;
    EXPECT_EQ(metric_total(decode_after, "moeserve:kv_transfers_total"), 7 + 3 + 4);
    EXPECT_EQ(metric_total(decode_after, "moeserve:kv_transfers_total", "role=\"consumer\""), 3 + 4);
    const PdBreakdown b = pd_breakdown(prefill_before, prefill_after, decode_before, decode_after);
    EXPECT_EQ(b.prefills, 4);
    EXPECT_EQ(b.transfers, 4);
    EXPECT_NEAR(b.prefill_queue_ms, 10.0, 1e-9);
    EXPECT_NEAR(b.prefill_ms, 200.0, 1e-9);
    EXPECT_NEAR(b.kv_wait_ms, 150.0, 1e-9);
    EXPECT_NEAR(b.kv_fetch_ms, 50.0, 1e-9);
    EXPECT_NEAR(b.kv_bytes, 1000.0, 1e-9);
    EXPECT_NEAR(b.decode_ttft_ms, 200.0, 1e-9);
    EXPECT_NEAR(b.first_decode_ms, 50.0, 1e-9);
    EXPECT_NE(format_pd_breakdown(b).find("Prefill (ms):"), std::string::npos);
    EXPECT_EQ(pd_breakdown_json(b)["kv_transfers"], 4);
}

}  // namespace
}  // namespace moeserve::bench
