// The `bench serve` flow, in vLLM benchmark_serving.py's order and with its console lines.
#include "moeserve/bench/bench_runner.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>

#include "moeserve/bench/pd_breakdown.h"
#include "moeserve/core/error.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::bench {

namespace {

using Clock = std::chrono::steady_clock;

std::string now_stamp() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
    return buf;
}

std::vector<SampleRequest> build_dataset(const BenchServeConfig& c, const tokenizer::Tokenizer& tok) {
    if (c.dataset_name == "random") return sample_random(tok, c.random);
    if (c.dataset_name == "sharegpt") {
        if (c.sharegpt.path.empty()) {
            raise(ErrorCode::kInvalidArgument, "--dataset-name sharegpt needs --dataset-path FILE.json");
        }
        return sample_sharegpt(tok, c.sharegpt);
    }
    raise(ErrorCode::kInvalidArgument, "--dataset-name must be random or sharegpt; got '{}'", c.dataset_name);
}

// tqdm-like one-line progress on stderr: "  37/100 [00:12] 3.01 req/s".
class Progress {
public:
    explicit Progress(bool enabled) : enabled_(enabled), start_(Clock::now()) {}
    void update(int64_t done, int64_t total) {
        if (!enabled_) return;
        const double s = std::chrono::duration<double>(Clock::now() - start_).count();
        const int pct = total ? static_cast<int>(100 * done / total) : 100;
        const int bar = pct / 5;
        std::fprintf(stderr, "\r%3d%%|%s%s| %lld/%lld [%02d:%02d, %.2f req/s]", pct,
                     std::string(static_cast<size_t>(bar), '#').c_str(),
                     std::string(static_cast<size_t>(20 - bar), ' ').c_str(), static_cast<long long>(done),
                     static_cast<long long>(total), static_cast<int>(s) / 60, static_cast<int>(s) % 60,
                     s > 0 ? done / s : 0.0);
        if (done == total) std::fprintf(stderr, "\n");
        std::fflush(stderr);
    }

private:
    bool enabled_;
    Clock::time_point start_;
};

}  // namespace

std::string python_float(double v) {
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (v == std::floor(v) && std::fabs(v) < 1e16) return fmt::format("{:.1f}", v);
    return fmt::format("{}", v);
}

nlohmann::ordered_json run_bench_serve(BenchServeConfig c, FILE* out) {
    const auto tok = tokenizer::Tokenizer::from_dir(c.tokenizer_dir);
    c.random.num_prompts = c.sharegpt.num_prompts = c.num_prompts;
    const std::vector<SampleRequest> requests = build_dataset(c, tok);
    if (c.client.model.empty()) c.client.model = first_served_model(c.client.server, c.client.api_key);
    if (c.model_id.empty()) c.model_id = c.client.model;
    // Validates rate and burstiness before anything is sent.
    arrival_offsets(1, c.client.request_rate, c.client.burstiness, c.client.seed);

    std::fprintf(out, "Starting initial single prompt test run...\n");
    std::fflush(out);
    {
        ServeBenchOptions probe = c.client;
        probe.on_progress = nullptr;
        probe.request_rate = std::numeric_limits<double>::infinity();
        const BenchRun test = run_benchmark_requests(probe, std::span(requests).first(1));
        if (!test.outputs[0].success) {
            raise(ErrorCode::kUnavailable,
                  "Initial test run failed - Please make sure benchmark arguments are correctly "
                  "specified. Error: {}",
                  test.outputs[0].error);
        }
    }
    std::fprintf(out, "Initial test run completed. Starting main benchmark run...\n");
    std::fprintf(out, "Traffic request rate: %s\n", python_float(c.client.request_rate).c_str());
    std::fprintf(out, "Burstiness factor: %s (%s)\n", python_float(c.client.burstiness).c_str(),
                 c.client.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
    std::fprintf(out, "Maximum request concurrency: %s\n",
                 c.client.max_concurrency ? std::to_string(*c.client.max_concurrency).c_str() : "None");
    std::fflush(out);

    Progress progress(!c.disable_progress);
    c.client.on_progress = [&progress](int64_t done, int64_t total) { progress.update(done, total); };
    const bool pd = !c.pd_prefill.empty() && !c.pd_decode.empty();
    const MetricsSample prefill_before = pd ? scrape_metrics(c.pd_prefill, c.client.api_key) : MetricsSample{};
    const MetricsSample decode_before = pd ? scrape_metrics(c.pd_decode, c.client.api_key) : MetricsSample{};
    const BenchRun run = run_benchmark_requests(c.client, requests);
    std::optional<PdBreakdown> breakdown;
    if (pd) {
        breakdown = pd_breakdown(prefill_before, scrape_metrics(c.pd_prefill, c.client.api_key), decode_before,
                                 scrape_metrics(c.pd_decode, c.client.api_key));
    }

    const auto count_tokens = [&tok](const std::string& text) {
        return static_cast<int64_t>(tok.encode(text, /*add_special_tokens=*/false).size());
    };
    const BenchmarkMetrics metrics = calculate_metrics(requests, run.outputs, run.duration_s, count_tokens, c.metrics);
    const RunInfo info{run.duration_s, c.client.max_concurrency, c.client.request_rate};
    std::fputs(format_result_table(metrics, info, c.metrics).c_str(), out);
    if (breakdown) std::fputs(format_pd_breakdown(*breakdown).c_str(), out);
    if (metrics.failed > 0) {
        std::fprintf(out, "Errors of the %lld failed requests:\n%s", static_cast<long long>(metrics.failed),
                     summarize_errors(run.outputs).c_str());
    }
    std::fflush(out);

    nlohmann::ordered_json j;
    const std::string date = now_stamp();
    j["date"] = date;
    j["backend"] = c.backend_name;
    j["model_id"] = c.model_id;
    j["tokenizer_id"] = c.tokenizer_dir.string();
    j["num_prompts"] = c.num_prompts;
    j["request_rate"] = std::isinf(c.client.request_rate) ? nlohmann::ordered_json("inf")
                                                          : nlohmann::ordered_json(c.client.request_rate);
    j["burstiness"] = c.client.burstiness;
    j["max_concurrency"] =
        c.client.max_concurrency ? nlohmann::ordered_json(*c.client.max_concurrency) : nlohmann::ordered_json();
    const nlohmann::ordered_json result = result_json(metrics, info, c.metrics, run.outputs);
    for (const auto& [key, value] : result.items()) j[key] = value;
    if (breakdown) j["pd_ttft_breakdown"] = pd_breakdown_json(*breakdown);

    if (c.save_result) {
        std::string name = c.result_filename;
        if (name.empty()) {
            std::string base_model = c.model_id;  // vLLM: model_id.split("/")[-1]
            while (!base_model.empty() && base_model.back() == '/') base_model.pop_back();
            base_model = base_model.substr(base_model.rfind('/') + 1);
            const std::string conc =
                c.client.max_concurrency ? fmt::format("-concurrency{}", *c.client.max_concurrency) : "";
            name = fmt::format("{}-{}qps{}-{}-{}.json", c.backend_name, python_float(c.client.request_rate), conc,
                               base_model, date);
        }
        const std::filesystem::path path = c.result_dir.empty() ? std::filesystem::path(name) : c.result_dir / name;
        std::ofstream f(path);
        if (!f) raise(ErrorCode::kIo, "cannot write the result file '{}'", path.string());
        f << j.dump() << "\n";
        if (!f) raise(ErrorCode::kIo, "writing the result file '{}' failed", path.string());
    }
    return j;
}

}  // namespace moeserve::bench
