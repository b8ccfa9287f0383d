// The client end to end against the fake streaming server on loopback: counts, timings present,
// failures (HTTP 500, connection refused) recorded, --max-concurrency honoured, request bodies,
// and the whole `bench serve` flow with the real Qwen3 tokenizer. Every wait is bounded.
#include "moeserve/bench/serve_bench.h"

#include <gtest/gtest.h>

#include <fstream>

#include "fake_openai_server.h"
#include "moeserve/bench/bench_runner.h"
#include "moeserve/core/error.h"
#include "test_support.h"

namespace moeserve::bench {
namespace {

using test::FakeOpenAiServer;
using test::FakeServerOptions;

std::vector<SampleRequest> requests(int n) {
    std::vector<SampleRequest> r;
    for (int i = 0; i < n; ++i) r.push_back({"prompt " + std::to_string(i), 2, 4});
    return r;
}

ServeBenchOptions options_for(uint16_t port) {
    ServeBenchOptions o;
    o.server.port = port;
    o.model = "fake-model";
    o.request_timeout_s = 20.0;
    return o;
}

TEST(ServeBenchTest, StreamsAllRequests) {
    FakeOpenAiServer server({.num_chunks = 4, .chunk_text = "hi"});
    auto o = options_for(server.port());
    o.api_key = "sk-test";
    int64_t last_progress = 0;
    o.on_progress = [&](int64_t done, int64_t total) {
        EXPECT_EQ(total, 10);
        last_progress = done;
    };
    const BenchRun run = run_benchmark_requests(o, requests(10));
    ASSERT_EQ(run.outputs.size(), 10u);
    for (const auto& out : run.outputs) {
        EXPECT_TRUE(out.success) << out.error;
        EXPECT_EQ(out.generated_text, "hihihihi");
        EXPECT_EQ(out.output_tokens, 4);
        EXPECT_EQ(out.itl_s.size(), 3u);
        EXPECT_GT(out.ttft_s, 0.0);
        EXPECT_GE(out.latency_s, out.ttft_s);
        EXPECT_EQ(out.prompt_len, 2);
    }
    EXPECT_EQ(last_progress, 10);
    EXPECT_GT(run.duration_s, 0.0);
    EXPECT_EQ(server.num_requests(), 10);
    const auto bodies = server.bodies();
    EXPECT_EQ(bodies[0]["model"], "fake-model");
    EXPECT_EQ(bodies[0]["max_tokens"], 4);
    EXPECT_EQ(bodies[0]["stream"], true);
    EXPECT_EQ(bodies[0]["stream_options"]["include_usage"], true);
    EXPECT_EQ(bodies[0]["temperature"], 0.0);
    EXPECT_FALSE(bodies[0].contains("ignore_eos"));
    EXPECT_EQ(server.authorizations()[0], "Bearer sk-test");
}

TEST(ServeBenchTest, ChunksAreTimedAsTheyArrive) {
    // The server pauses 200 ms after the first chunk: a client that timestamps chunks as they
    // arrive sees TTFT well before E2EL (one that waits for the whole body sees them equal).
    FakeOpenAiServer server({.num_chunks = 3, .pause_after_first_ms = 200});
    const BenchRun run = run_benchmark_requests(options_for(server.port()), requests(1));
    ASSERT_TRUE(run.outputs[0].success) << run.outputs[0].error;
    EXPECT_GT(run.outputs[0].latency_s - run.outputs[0].ttft_s, 0.1);
    EXPECT_GT(run.outputs[0].itl_s.at(0), 0.1);
}

TEST(ServeBenchTest, ChatBackend) {
    FakeOpenAiServer server({.num_chunks = 3, .chunk_text = "ok", .send_usage = false, .chat = true});
    auto o = options_for(server.port());
    o.backend = Backend::kOpenAiChat;
    o.endpoint = "/v1/chat/completions";
    o.ignore_eos = true;
    const BenchRun run = run_benchmark_requests(o, requests(3));
    for (const auto& out : run.outputs) {
        EXPECT_TRUE(out.success) << out.error;
        EXPECT_EQ(out.generated_text, "okokok");
        EXPECT_FALSE(out.output_tokens.has_value());  // the report will tokenize the text
        EXPECT_EQ(out.itl_s.size(), 2u);              // the role chunk is not a token
    }
    const auto body = server.bodies()[0];
    EXPECT_EQ(body["messages"][0]["role"], "user");
    EXPECT_EQ(body["messages"][0]["content"].get<std::string>().rfind("prompt ", 0), 0u);
    EXPECT_EQ(body["max_completion_tokens"], 4);
    EXPECT_EQ(body["ignore_eos"], true);
}

TEST(ServeBenchTest, CountsHttpErrorsAsFailed) {
    FakeOpenAiServer server({.status_for = [](const nlohmann::json& body) {
        return body["prompt"].get<std::string>().back() % 2 == 0 ? 500 : 200;
    }});
    const BenchRun run = run_benchmark_requests(options_for(server.port()), requests(6));
    int failed = 0;
    for (size_t i = 0; i < run.outputs.size(); ++i) {
        const bool even = i % 2 == 0;
        EXPECT_EQ(run.outputs[i].success, !even) << i;
        if (even) {
            ++failed;
            EXPECT_EQ(run.outputs[i].error, "HTTP 500 Internal Server Error: fake failure");
        }
    }
    EXPECT_EQ(failed, 3);
}

TEST(ServeBenchTest, ConnectionRefusedIsRecordedNotThrown) {
    const BenchRun run = run_benchmark_requests(options_for(test::unused_port()), requests(3));
    for (const auto& out : run.outputs) {
        EXPECT_FALSE(out.success);
        EXPECT_NE(out.error.find("refused"), std::string::npos) << out.error;
    }
}

TEST(ServeBenchTest, MaxConcurrencyIsHonoured) {
    // The server holds the first 2 requests until both are open, so the peak reaches the cap;
    // the client must never exceed it.
    FakeOpenAiServer server({.num_chunks = 2, .hold_until_in_flight = 2});
    auto o = options_for(server.port());
    o.max_concurrency = 2;
    const BenchRun run = run_benchmark_requests(o, requests(8));
    for (const auto& out : run.outputs) EXPECT_TRUE(out.success) << out.error;
    EXPECT_EQ(server.max_in_flight(), 2);
    EXPECT_EQ(server.num_requests(), 8);
}

TEST(ServeBenchTest, UnlimitedSendsAllAtOnce) {
    FakeOpenAiServer server({.num_chunks = 2, .hold_until_in_flight = 12});
    const BenchRun run = run_benchmark_requests(options_for(server.port()), requests(12));
    for (const auto& out : run.outputs) EXPECT_TRUE(out.success) << out.error;
    EXPECT_EQ(server.max_in_flight(), 12);
}

TEST(ServeBenchTest, ArrivalOffsets) {
    const auto inf = arrival_offsets(4, std::numeric_limits<double>::infinity(), 1.0, 0);
    EXPECT_EQ(inf, std::vector<double>(4, 0.0));
    const auto a = arrival_offsets(2000, 100.0, 1.0, 3);
    EXPECT_EQ(a[0], 0.0);
    for (size_t i = 1; i < a.size(); ++i) EXPECT_GE(a[i], a[i - 1]);
    // Mean gap 1/rate: 1999 gaps of mean 10 ms, sd 10 ms -> the total is 19.99 s +- ~0.45 s.
    EXPECT_NEAR(a.back(), 19.99, 2.0);
    const auto bursty = arrival_offsets(2000, 100.0, 0.25, 3);
    EXPECT_NEAR(bursty.back(), 19.99, 4.0);
    EXPECT_EQ(arrival_offsets(5, 100.0, 1.0, 3), arrival_offsets(5, 100.0, 1.0, 3));
    EXPECT_THROW(arrival_offsets(1, 0.0, 1.0, 0), Error);
    EXPECT_THROW(arrival_offsets(1, 1.0, 0.0, 0), Error);
}

TEST(ServeBenchTest, ParsesBaseUrlAndBackend) {
    const auto a = parse_base_url("http://10.0.0.5:8123/proxy/");
    EXPECT_EQ(a.host, "10.0.0.5");
    EXPECT_EQ(a.port, 8123);
    EXPECT_EQ(a.path_prefix, "/proxy");
    const auto b = parse_base_url("http://localhost");
    EXPECT_EQ(b.port, 80);
    EXPECT_EQ(b.path_prefix, "");
    EXPECT_THROW(parse_base_url("https://x"), Error);
    EXPECT_THROW(parse_base_url("localhost:8000"), Error);
    EXPECT_THROW(parse_base_url("http://x:99999"), Error);
    EXPECT_EQ(parse_backend("vllm"), Backend::kOpenAiCompletions);
    EXPECT_THROW(parse_backend("tgi"), Error);
}

TEST(ServeBenchTest, AsksServerForModel) {
    FakeOpenAiServer server({});
    ServerAddress addr;
    addr.port = server.port();
    EXPECT_EQ(first_served_model(addr, "", 10.0), "fake-model");
    addr.port = test::unused_port();
    EXPECT_THROW(first_served_model(addr, "", 10.0), Error);
}

TEST(ServeBenchTest, BenchServeFlowWritesVllmResultJson) {
    FakeOpenAiServer server({.num_chunks = 5, .chunk_text = " word"});
    BenchServeConfig c;
    c.client = options_for(server.port());
    c.client.model.clear();  // ask GET /v1/models
    c.client.max_concurrency = 4;
    c.tokenizer_dir = moeserve::test::tokenizer_dir("qwen3");
    c.num_prompts = 8;
    c.random = {.input_len = 32, .output_len = 16, .seed = 0};
    c.metrics.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
    c.metrics.goodput_slo_ms = {{"e2el", 60000.0}};
    c.disable_progress = true;
    c.save_result = true;
    c.result_dir = moeserve::test::scratch_dir("bench_flow");
    c.result_filename = "result.json";
    FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    const auto j = run_bench_serve(c, out);
    std::rewind(out);
    std::string printed(1 << 16, '\0');
    printed.resize(std::fread(printed.data(), 1, printed.size(), out));
    std::fclose(out);

    EXPECT_NE(printed.find("============ Serving Benchmark Result ============"), std::string::npos);
    EXPECT_NE(printed.find("Successful requests:                     8"), std::string::npos) << printed;
    EXPECT_NE(printed.find("Total input tokens:                      256"), std::string::npos) << printed;
    EXPECT_NE(printed.find("Total generated tokens:                  40"), std::string::npos) << printed;
    EXPECT_EQ(server.num_requests(), 9);  // the initial test request + 8
    EXPECT_EQ(j["completed"], 8);
    EXPECT_EQ(j["failed"], 0);
    EXPECT_EQ(j["model_id"], "fake-model");
    EXPECT_EQ(j["max_concurrency"], 4);
    EXPECT_EQ(j["request_rate"], "inf");
    EXPECT_DOUBLE_EQ(j["request_goodput"].get<double>() * j["duration"].get<double>(), 8.0);
    std::ifstream f(c.result_dir / "result.json");
    const auto saved = nlohmann::json::parse(f);
    for (const char* key : {"date",
                            "backend",
                            "model_id",
                            "tokenizer_id",
                            "num_prompts",
                            "request_rate",
                            "burstiness",
                            "max_concurrency",
                            "duration",
                            "completed",
                            "failed",
                            "total_input_tokens",
                            "total_output_tokens",
                            "request_throughput",
                            "request_goodput",
                            "output_throughput",
                            "total_token_throughput",
                            "input_lens",
                            "output_lens",
                            "ttfts",
                            "itls",
                            "generated_texts",
                            "errors",
                            "mean_ttft_ms",
                            "median_ttft_ms",
                            "std_ttft_ms",
                            "p99_ttft_ms",
                            "mean_tpot_ms",
                            "p99_tpot_ms",
                            "mean_itl_ms",
                            "p99_itl_ms",
                            "mean_e2el_ms",
                            "p99_e2el_ms"}) {
        EXPECT_TRUE(saved.contains(key)) << key;
    }
    EXPECT_EQ(saved["input_lens"], nlohmann::json(std::vector<int>(8, 32)));
    EXPECT_EQ(saved["output_lens"], nlohmann::json(std::vector<int>(8, 5)));
}

TEST(ServeBenchTest, BenchServeFailsFastWhenInitialTestFails) {
    BenchServeConfig c;
    c.client = options_for(test::unused_port());
    c.tokenizer_dir = moeserve::test::tokenizer_dir("qwen3");
    c.num_prompts = 2;
    c.random = {.input_len = 8, .output_len = 4};
    c.disable_progress = true;
    FILE* out = std::tmpfile();
    EXPECT_THROW(run_bench_serve(c, out), Error);
    std::fclose(out);
}

}  // namespace
}  // namespace moeserve::bench
