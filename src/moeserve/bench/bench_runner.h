// `moeserve bench serve` end to end: build the data set with the tokenizer, run the initial
// single-prompt test, run the benchmark, print vLLM's result block, save the result JSON.
// The CLI parses flags into BenchServeConfig; everything else happens here.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "moeserve/bench/datasets.h"
#include "moeserve/bench/report.h"
#include "moeserve/bench/serve_bench.h"

namespace moeserve::bench {

struct BenchServeConfig {
    std::string backend_name = "openai";  // as given, for the result JSON and file name
    ServeBenchOptions client;             // model empty: ask GET /v1/models
    std::string model_id;                 // --model as given ("" if not)
    std::filesystem::path tokenizer_dir;  // folder with tokenizer.json
    std::string dataset_name = "random";  // random | sharegpt
    int64_t num_prompts = 1000;
    RandomDatasetOptions random;  // num_prompts is set from the field above
    ShareGptOptions sharegpt;
    MetricsConfig metrics;
    bool disable_progress = false;
    bool save_result = false;
    std::filesystem::path result_dir;  // "" = current directory
    std::string result_filename;       // "" = vLLM's {backend}-{rate}qps[-concurrency{N}]-{model}-{date}.json
    // PD disaggregation: the instances behind the proxy, whose /metrics give the TTFT breakdown
    // (pd_breakdown.h); both empty: none.
    std::vector<ServerAddress> pd_prefill, pd_decode;
};

// Runs the benchmark; prints progress to stderr and the report to `out`. Returns the result JSON
// (as saved with --save-result: date, backend, model_id, tokenizer_id, num_prompts, request_rate,
// burstiness, max_concurrency, then result_json()'s fields). Error kUnavailable if the initial
// test request fails (as vLLM: "Initial test run failed"), kInvalidArgument for bad settings.
nlohmann::ordered_json run_bench_serve(BenchServeConfig config, FILE* out);

// Python's str(float) for the numbers vLLM prints: "inf", "1.0", "0.5".
std::string python_float(double v);

}  // namespace moeserve::bench
