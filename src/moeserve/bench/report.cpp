// Metrics and report of a serving benchmark run; definitions follow vLLM's benchmark_serving.py
// (calculate_metrics and the print block of benchmark()) so our numbers diff against theirs.
#include "moeserve/bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "moeserve/core/error.h"

namespace moeserve::bench {

namespace {

constexpr double kMsPerS = 1000.0;

std::string trim(std::string_view s) {
    size_t b = 0;
    size_t e = s.size();
    while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
    while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
    return std::string(s.substr(b, e - b));
}

std::vector<std::string> split_csv(const std::string& csv) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t comma = csv.find(',', start);
        parts.push_back(trim(std::string_view(csv).substr(start, comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return parts;
}

std::optional<double> parse_double(const std::string& s) {
    double v = 0.0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

bool is_selected(const MetricsConfig& config, std::string_view name) {
    return std::find(config.percentile_metrics.begin(), config.percentile_metrics.end(), name) !=
           config.percentile_metrics.end();
}

// One "{:<40} {:<10}" row as Python's str.format prints it (trailing padding included).
void row(std::string& out, std::string_view label, int64_t value) {
    out += fmt::format("{:<40} {:<10}\n", label, value);
}
void row(std::string& out, std::string_view label, double value) {
    out += fmt::format("{:<40} {:<10.2f}\n", label, value);
}

struct MetricSection {
    const char* key;     // "ttft"
    const char* name;    // "TTFT"
    const char* header;  // "Time to First Token"
    const LatencyStats BenchmarkMetrics::*stats;
};

constexpr MetricSection kSections[] = {
    {"ttft", "TTFT", "Time to First Token", &BenchmarkMetrics::ttft},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &BenchmarkMetrics::tpot},
    {"itl", "ITL", "Inter-token Latency", &BenchmarkMetrics::itl},
    {"e2el", "E2EL", "End-to-end Latency", &BenchmarkMetrics::e2el},
};

}  // namespace

double percentile(std::span<const double> values, double p) {
    if (values.empty()) return 0.0;
    std::vector<double> sorted(values.begin(), values.end());
    std::sort(sorted.begin(), sorted.end());
    // numpy "linear": virtual index (n - 1) * p / 100, interpolate between its neighbours.
    const double pos = static_cast<double>(sorted.size() - 1) * p / 100.0;
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, sorted.size() - 1);
    const double frac = pos - static_cast<double>(lo);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

LatencyStats latency_stats(std::span<const double> values_s, std::span<const double> percentiles) {
    LatencyStats stats;
    if (!values_s.empty()) {
        const double n = static_cast<double>(values_s.size());
        const double mean = std::accumulate(values_s.begin(), values_s.end(), 0.0) / n;
        double sq = 0.0;
        for (double v : values_s) sq += (v - mean) * (v - mean);
        stats.mean_ms = mean * kMsPerS;
        stats.std_ms = std::sqrt(sq / n) * kMsPerS;
        stats.median_ms = percentile(values_s, 50.0) * kMsPerS;
    }
    for (double p : percentiles) {
        stats.percentiles_ms.emplace_back(p, percentile(values_s, p) * kMsPerS);
    }
    return stats;
}

BenchmarkMetrics calculate_metrics(std::span<const SampleRequest> inputs, std::span<const RequestOutput> outputs,
                                   double duration_s, const TokenCounter& count_tokens, const MetricsConfig& config) {
    MOESERVE_CHECK(inputs.size() == outputs.size(), "{} inputs vs {} outputs", inputs.size(), outputs.size());
    MOESERVE_CHECK(duration_s > 0.0, "duration {}", duration_s);
    BenchmarkMetrics m;
    std::vector<double> ttfts, tpots, all_tpots, itls, e2els;
    for (size_t i = 0; i < outputs.size(); ++i) {
        const RequestOutput& out = outputs[i];
        if (!out.success) {
            m.output_lens.push_back(0);
            ++m.failed;
            continue;
        }
        // NOTE: as vLLM, prefer the server's usage; else re-tokenize the text, which may differ
        // slightly from the generated ids (merges across chunk boundaries).
        const int64_t output_len = out.output_tokens ? *out.output_tokens : count_tokens(out.generated_text);
        m.output_lens.push_back(output_len);
        m.total_input += inputs[i].prompt_len;
        double tpot = 0.0;  // goodput treats requests with <= 1 output token as TPOT 0
        if (output_len > 1) {
            tpot = (out.latency_s - out.ttft_s) / static_cast<double>(output_len - 1);
            tpots.push_back(tpot);
        }
        all_tpots.push_back(tpot);
        itls.insert(itls.end(), out.itl_s.begin(), out.itl_s.end());
        ttfts.push_back(out.ttft_s);
        e2els.push_back(out.latency_s);
        ++m.completed;
    }
    m.total_output = std::accumulate(m.output_lens.begin(), m.output_lens.end(), int64_t{0});

    int64_t good = 0;
    if (!config.goodput_slo_ms.empty()) {
        for (size_t r = 0; r < ttfts.size(); ++r) {
            bool ok = true;
            for (const auto& [name, slo_ms] : config.goodput_slo_ms) {
                const double v = name == "ttft" ? ttfts[r] : name == "tpot" ? all_tpots[r] : e2els[r];
                ok = ok && v <= slo_ms / kMsPerS;
            }
            good += ok ? 1 : 0;
        }
    }
    const auto per_s = [&](double x) { return x / duration_s; };
    m.request_throughput = per_s(static_cast<double>(m.completed));
    m.request_goodput = per_s(static_cast<double>(good));
    m.output_throughput = per_s(static_cast<double>(m.total_output));
    m.total_token_throughput = per_s(static_cast<double>(m.total_input + m.total_output));
    m.ttft = latency_stats(ttfts, config.percentiles);
    m.tpot = latency_stats(tpots, config.percentiles);
    m.itl = latency_stats(itls, config.percentiles);
    m.e2el = latency_stats(e2els, config.percentiles);
    return m;
}

std::string percentile_word(double p) {
    if (p == std::floor(p)) return fmt::format("{}", static_cast<int64_t>(p));
    return fmt::format("{}", p);
}

std::string format_result_table(const BenchmarkMetrics& m, const RunInfo& info, const MetricsConfig& config) {
    std::string out = fmt::format("{:=^50}\n", " Serving Benchmark Result ");
    row(out, "Successful requests:", m.completed);
    row(out, "Failed requests:", m.failed);
    if (info.max_concurrency) row(out, "Maximum request concurrency:", int64_t{*info.max_concurrency});
    if (!std::isinf(info.request_rate)) row(out, "Request rate configured (RPS):", info.request_rate);
    row(out, "Benchmark duration (s):", info.duration_s);
    row(out, "Total input tokens:", m.total_input);
    row(out, "Total generated tokens:", m.total_output);
    row(out, "Request throughput (req/s):", m.request_throughput);
    if (!config.goodput_slo_ms.empty()) row(out, "Request goodput (req/s):", m.request_goodput);
    row(out, "Output token throughput (tok/s):", m.output_throughput);
    row(out, "Total Token throughput (tok/s):", m.total_token_throughput);
    for (const MetricSection& s : kSections) {
        if (!is_selected(config, s.key)) continue;
        const LatencyStats& st = m.*(s.stats);
        out += fmt::format("{:-^50}\n", s.header);
        row(out, fmt::format("Mean {} (ms):", s.name), st.mean_ms);
        row(out, fmt::format("Median {} (ms):", s.name), st.median_ms);
        for (const auto& [p, v] : st.percentiles_ms) {
            row(out, fmt::format("P{} {} (ms):", percentile_word(p), s.name), v);
        }
    }
    out += std::string(50, '=') + "\n";
    return out;
}

nlohmann::ordered_json result_json(const BenchmarkMetrics& m, const RunInfo& info, const MetricsConfig& config,
                                   std::span<const RequestOutput> outputs) {
    nlohmann::ordered_json j;
    j["duration"] = info.duration_s;
    j["completed"] = m.completed;
    j["failed"] = m.failed;
    j["total_input_tokens"] = m.total_input;
    j["total_output_tokens"] = m.total_output;
    j["request_throughput"] = m.request_throughput;
    j["request_goodput"] =
        config.goodput_slo_ms.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(m.request_goodput);
    j["output_throughput"] = m.output_throughput;
    j["total_token_throughput"] = m.total_token_throughput;
    auto& input_lens = j["input_lens"] = nlohmann::ordered_json::array();
    auto& ttfts = j["ttfts"] = nlohmann::ordered_json::array();
    auto& itls = j["itls"] = nlohmann::ordered_json::array();
    auto& texts = j["generated_texts"] = nlohmann::ordered_json::array();
    auto& errors = j["errors"] = nlohmann::ordered_json::array();
    for (const RequestOutput& out : outputs) {
        input_lens.push_back(out.prompt_len);
        ttfts.push_back(out.ttft_s);
        itls.push_back(out.itl_s);
        texts.push_back(out.generated_text);
        errors.push_back(out.error);
    }
    j["output_lens"] = m.output_lens;
    for (const MetricSection& s : kSections) {
        if (!is_selected(config, s.key)) continue;
        const LatencyStats& st = m.*(s.stats);
        j[fmt::format("mean_{}_ms", s.key)] = st.mean_ms;
        j[fmt::format("median_{}_ms", s.key)] = st.median_ms;
        j[fmt::format("std_{}_ms", s.key)] = st.std_ms;
        for (const auto& [p, v] : st.percentiles_ms) {
            j[fmt::format("p{}_{}_ms", percentile_word(p), s.key)] = v;
        }
    }
    return j;
}

std::map<std::string, double> parse_goodput(std::span<const std::string> pairs) {
    std::map<std::string, double> slo;
    for (const std::string& pair : pairs) {
        const size_t colon = pair.find(':');
        const auto value = colon == std::string::npos ? std::nullopt : parse_double(trim(pair.substr(colon + 1)));
        if (!value) {
            raise(ErrorCode::kInvalidArgument,
                  "--goodput expects KEY:VALUE pairs (a metric name and milliseconds), e.g. "
                  "ttft:500 tpot:50; got '{}'",
                  pair);
        }
        const std::string name = trim(pair.substr(0, colon));
        if (name != "ttft" && name != "tpot" && name != "e2el") {
            raise(ErrorCode::kInvalidArgument,
                  "--goodput: unknown metric '{}' in '{}'; expected one of ttft, tpot, e2el", name, pair);
        }
        if (*value < 0.0) {
            raise(ErrorCode::kInvalidArgument, "--goodput: the SLO of {} must be non-negative milliseconds; got {}",
                  name, *value);
        }
        slo[name] = *value;
    }
    return slo;
}

std::vector<std::string> parse_percentile_metrics(const std::string& csv) {
    std::vector<std::string> names = split_csv(csv);
    for (const std::string& name : names) {
        if (name != "ttft" && name != "tpot" && name != "itl" && name != "e2el") {
            raise(ErrorCode::kInvalidArgument,
                  "--percentile-metrics: unknown metric '{}' in '{}'; expected a comma-separated "
                  "list of ttft, tpot, itl, e2el",
                  name, csv);
        }
    }
    return names;
}

std::vector<double> parse_metric_percentiles(const std::string& csv) {
    std::vector<double> ps;
    for (const std::string& part : split_csv(csv)) {
        const auto p = parse_double(part);
        if (!p || *p < 0.0 || *p > 100.0) {
            raise(ErrorCode::kInvalidArgument,
                  "--metric-percentiles expects comma-separated numbers in [0, 100], e.g. "
                  "'25,50,99'; got '{}' in '{}'",
                  part, csv);
        }
        ps.push_back(*p);
    }
    return ps;
}

std::string summarize_errors(std::span<const RequestOutput> outputs) {
    std::map<std::string, int64_t> counts;
    for (const RequestOutput& out : outputs) {
        if (!out.success) ++counts[out.error.empty() ? "(no error message)" : out.error];
    }
    std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string out;
    for (const auto& [error, n] : sorted) out += fmt::format("  {} x {}\n", n, error);
    return out;
}

}  // namespace moeserve::bench
