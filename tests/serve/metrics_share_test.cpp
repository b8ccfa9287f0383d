// Several API servers (--api-server-count): each /metrics shows the sums of every server's request
// and HTTP counts through the snapshot files, whichever server renders it.
#include <gtest/gtest.h>

#include <fstream>

#include "moeserve/serve/metrics.h"
#include "test_support.h"

namespace moeserve::serve {
namespace {

FinishedRequest finished(const char* reason, double e2e) {
    FinishedRequest r;
    r.finish_reason = reason;
    r.num_prompt_tokens = 5;
    r.num_generation_tokens = 3;
    r.ttft_s = 0.01;
    r.e2e_s = e2e;
    return r;
}

bool has_line(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(MetricsShareTest, EachServerRendersTheSumsOfAll) {
    const auto dir = test::scratch_dir("metrics_share");
    const std::string p0 = (dir / "api0.metrics").string(), p1 = (dir / "api1.metrics").string();
    Metrics m0("tiny"), m1("tiny");
    m0.share(0, p0, {p1});
    m1.share(1, p1, {p0});
    m0.on_request_finished(finished("length", 0.4));
    m0.on_http_status(200);
    m1.on_request_finished(finished("length", 2.0));
    m1.on_request_finished(finished("stop", 0.2));
    m1.on_http_status(200);
    m1.on_http_status(400);
    // Before the other's snapshot exists: own counts only, the other's as zero.
    std::string text = m0.render({}, 1);
    EXPECT_TRUE(has_line(text, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1")) << text;
    EXPECT_TRUE(has_line(text, "moeserve:api_server_requests_total{model_name=\"tiny\",api_server=\"1\"} 0")) << text;
    m0.write_snapshot(1);
    m1.write_snapshot(2);
    for (const Metrics* m : {&m0, &m1}) {
        text = m->render({}, m == &m0 ? 1 : 2);
        EXPECT_TRUE(has_line(text, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 2"))
            << text;
        EXPECT_TRUE(has_line(text, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"stop\"} 1"));
        EXPECT_TRUE(has_line(text, "vllm:e2e_request_latency_seconds_count{model_name=\"tiny\"} 3"));
        EXPECT_TRUE(has_line(text, "vllm:e2e_request_latency_seconds_sum{model_name=\"tiny\"} 2.6"));
        EXPECT_TRUE(has_line(text, "vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"0.5\"} 2"));
        EXPECT_TRUE(has_line(text, "moeserve:http_responses_total{model_name=\"tiny\",status=\"200\"} 2"));
        EXPECT_TRUE(has_line(text, "moeserve:http_responses_total{model_name=\"tiny\",status=\"400\"} 1"));
        EXPECT_TRUE(has_line(text, "moeserve:num_requests_in_flight{model_name=\"tiny\"} 3"));
        EXPECT_TRUE(has_line(text, "moeserve:api_server_requests_total{model_name=\"tiny\",api_server=\"0\"} 1"));
        EXPECT_TRUE(has_line(text, "moeserve:api_server_requests_total{model_name=\"tiny\",api_server=\"1\"} 2"));
    }
}

TEST(MetricsShareTest, AMalformedSnapshotCountsAsZero) {
    const auto dir = test::scratch_dir("metrics_share_malformed");
    const std::string p0 = (dir / "api0.metrics").string(), p1 = (dir / "api1.metrics").string();
    std::ofstream(p1) << "reason length 5\nhistogram 0 not numbers\n";
    Metrics m0("tiny");
    m0.share(0, p0, {p1});
    m0.on_request_finished(finished("length", 0.4));
    const std::string text = m0.render({}, 0);
    EXPECT_TRUE(has_line(text, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1")) << text;
    EXPECT_TRUE(has_line(text, "moeserve:api_server_requests_total{model_name=\"tiny\",api_server=\"1\"} 0"));
}

// A server started again in place of a dead one continues from the dead process's last snapshot
// (not its in-flight requests, which died with it), so the sums never go back.
TEST(MetricsShareTest, ARestartedServerContinuesTheDeadOnesCounts) {
    const auto dir = test::scratch_dir("metrics_share_restart");
    const std::string p0 = (dir / "api0.metrics").string(), p1 = (dir / "api1.metrics").string();
    {
        Metrics dead("tiny");
        dead.share(1, p1, {p0}, 1);  // itself a restart
        dead.on_request_finished(finished("length", 0.4));
        dead.on_http_status(200);
        dead.write_snapshot(4);
    }
    Metrics m0("tiny"), m1("tiny");
    m0.share(0, p0, {p1});
    m1.share(1, p1, {p0}, 2);
    m1.on_request_finished(finished("stop", 0.2));
    m1.write_snapshot(0);
    m0.write_snapshot(0);
    for (const Metrics* m : {&m0, &m1}) {
        const std::string text = m->render({}, 0);
        EXPECT_TRUE(has_line(text, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1"))
            << text;
        EXPECT_TRUE(has_line(text, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"stop\"} 1"));
        EXPECT_TRUE(has_line(text, "moeserve:http_responses_total{model_name=\"tiny\",status=\"200\"} 1"));
        EXPECT_TRUE(has_line(text, "moeserve:api_server_requests_total{model_name=\"tiny\",api_server=\"1\"} 2"));
        EXPECT_TRUE(has_line(text, "moeserve:num_requests_in_flight{model_name=\"tiny\"} 0"));
        EXPECT_TRUE(has_line(text, "moeserve:api_server_restarts_total{model_name=\"tiny\"} 2"));
    }
}

TEST(MetricsShareTest, UnsharedRendersNoPerServerSeries) {
    Metrics m("tiny");
    EXPECT_EQ(m.render({}, 0).find("api_server_requests_total"), std::string::npos);
}

}  // namespace
}  // namespace moeserve::serve
