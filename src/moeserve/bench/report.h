// The metrics of a serving benchmark run, computed and printed exactly as vLLM's
// benchmarks/benchmark_serving.py does (calculate_metrics, the "Serving Benchmark Result" block,
// the --save-result JSON). Pure functions over per-request timings: no I/O, no tokenizer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "moeserve/bench/sample_request.h"

namespace moeserve::bench {

// What the client measured for one request (vLLM's RequestFuncOutput). Times in seconds.
struct RequestOutput {
    bool success = false;
    double latency_s = 0.0;       // send -> last chunk (E2EL)
    double ttft_s = 0.0;          // send -> first chunk with generated content
    std::vector<double> itl_s{};  // gaps between consecutive content chunks (one per chunk after 1st)
    std::string generated_text{};
    std::optional<int64_t> output_tokens{};  // usage.completion_tokens when the server sent it
    int64_t prompt_len = 0;
    std::string error{};  // empty when success
};

// Which statistics to compute and print (--percentile-metrics, --metric-percentiles, --goodput).
struct MetricsConfig {
    std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};  // of ttft tpot itl e2el
    std::vector<double> percentiles = {99.0};
    std::map<std::string, double> goodput_slo_ms;  // "ttft"|"tpot"|"e2el" -> SLO in ms; empty: off
};

// Mean/median/std and percentiles of one latency metric, in milliseconds.
struct LatencyStats {
    double mean_ms = 0.0;
    double median_ms = 0.0;
    double std_ms = 0.0;
    std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
};

struct BenchmarkMetrics {
    int64_t completed = 0;
    int64_t failed = 0;
    int64_t total_input = 0;
    int64_t total_output = 0;
    double request_throughput = 0.0;      // completed / duration
    double request_goodput = 0.0;         // requests meeting every SLO / duration
    double output_throughput = 0.0;       // total_output / duration
    double total_token_throughput = 0.0;  // (total_input + total_output) / duration
    LatencyStats ttft;
    LatencyStats tpot;
    LatencyStats itl;
    LatencyStats e2el;
    std::vector<int64_t> output_lens;  // per request; 0 for failed ones (vLLM's actual_output_lens)
};

// Counts the tokens of a generated text (the tokenizer, without special tokens).
using TokenCounter = std::function<int64_t(const std::string&)>;

// numpy.percentile(values, p) with the default linear interpolation; 0 for an empty list
// (as vLLM's `np.percentile(xs or 0, p)`). p in [0, 100].
double percentile(std::span<const double> values, double p);
// numpy mean / median / population std (ddof=0) of values in seconds, reported in ms.
LatencyStats latency_stats(std::span<const double> values_s, std::span<const double> percentiles);

// vLLM's calculate_metrics. inputs[i] and outputs[i] describe request i. Output tokens come from
// outputs[i].output_tokens when the server sent usage, else count_tokens(generated_text).
// TPOT = (E2EL - TTFT) / (output_tokens - 1) over requests with more than one output token; ITL
// pools every request's gaps; goodput counts a request only if it meets every SLO given (a
// request with <= 1 output token has TPOT 0 there). duration_s > 0.
BenchmarkMetrics calculate_metrics(std::span<const SampleRequest> inputs, std::span<const RequestOutput> outputs,
                                   double duration_s, const TokenCounter& count_tokens, const MetricsConfig& config);

// What the header rows need beyond the metrics.
struct RunInfo {
    double duration_s = 0.0;
    std::optional<int> max_concurrency;
    double request_rate = 0.0;  // +inf for "all at once"
};

// The "Serving Benchmark Result" block, byte for byte as vLLM prints it ("{:<40} {:<10}" rows,
// sections for the selected metrics in the order ttft, tpot, itl, e2el), ending in a newline.
std::string format_result_table(const BenchmarkMetrics& metrics, const RunInfo& info, const MetricsConfig& config);

// The benchmark's part of the --save-result JSON (vLLM's `result` dict): duration, completed,
// failed, token totals, throughputs, request_goodput (null without --goodput), per-request
// input_lens, output_lens, ttfts, itls, generated_texts, errors, and for each selected metric
// mean_/median_/std_/p<P>_<metric>_ms.
nlohmann::ordered_json result_json(const BenchmarkMetrics& metrics, const RunInfo& info, const MetricsConfig& config,
                                   std::span<const RequestOutput> outputs);

// "99" for 99.0, "99.9" for 99.9: the P<word> of row labels and JSON keys (Python's str()).
std::string percentile_word(double p);

// Parses --goodput "ttft:500" "tpot:50" pairs; Error kInvalidArgument for an unknown metric, a
// malformed pair or a negative value.
std::map<std::string, double> parse_goodput(std::span<const std::string> pairs);
// Parses --percentile-metrics "ttft,tpot,itl" (names of ttft tpot itl e2el) and
// --metric-percentiles "25,50,99" (each in [0, 100], as numpy accepts); Error otherwise.
std::vector<std::string> parse_percentile_metrics(const std::string& csv);
std::vector<double> parse_metric_percentiles(const std::string& csv);

// One line per distinct error with its count, most frequent first ("  3 x HTTP 500: ...").
std::string summarize_errors(std::span<const RequestOutput> outputs);

}  // namespace moeserve::bench
