// `moeserve bench serve`: the serving benchmark with vLLM benchmark_serving.py's flags, against
// any OpenAI-compatible server. Parses flags and the environment into BenchServeConfig; the
// bench library does the rest.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/bench/bench_runner.h"
#include "moeserve/cli/commands.h"
#include "moeserve/core/error.h"

namespace moeserve::cli {

namespace {

struct BenchServeFlags {
    std::string backend = "openai";
    std::string base_url;
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string endpoint;
    std::string model;
    std::string served_model_name;
    std::string tokenizer;
    std::string dataset_name = "random";
    std::string dataset_path;
    int64_t num_prompts = 1000;
    std::string request_rate = "inf";
    double burstiness = 1.0;
    int max_concurrency = 0;
    uint64_t seed = 0;
    bool ignore_eos = false;
    int64_t random_input_len = 1024;
    int64_t random_output_len = 128;
    double random_range_ratio = 0.0;
    int64_t random_prefix_len = 0;
    int64_t sharegpt_output_len = 0;
    std::string percentile_metrics = "ttft,tpot,itl";
    std::string metric_percentiles = "99";
    std::vector<std::string> goodput;
    bool save_result = false;
    std::string result_dir;
    std::string result_filename;
    bool disable_tqdm = false;
    std::string api_key;
    double request_timeout = 6 * 3600.0;
    std::vector<std::string> pd_prefill_urls, pd_decode_urls;
};

double parse_rate(const std::string& s) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(v > 0.0)) {
        raise(ErrorCode::kInvalidArgument, "--request-rate must be a positive number or inf; got '{}'", s);
    }
    return v;
}

bench::BenchServeConfig to_config(const BenchServeFlags& f) {
    bench::BenchServeConfig c;
    c.backend_name = f.backend;
    auto& o = c.client;
    o.backend = bench::parse_backend(f.backend);
    if (!f.base_url.empty()) {
        o.server = bench::parse_base_url(f.base_url);
    } else {
        if (f.port < 1 || f.port > 65535) raise(ErrorCode::kInvalidArgument, "--port must be 1..65535; got {}", f.port);
        o.server.host = f.host;
        o.server.port = static_cast<uint16_t>(f.port);
    }
    o.endpoint = !f.endpoint.empty()                        ? f.endpoint
                 : o.backend == bench::Backend::kOpenAiChat ? "/v1/chat/completions"
                                                            : "/v1/completions";
    o.model = !f.served_model_name.empty() ? f.served_model_name : f.model;
    c.model_id = f.model;
    // env: OPENAI_API_KEY, the key sent as "Authorization: Bearer" when --api-key is not given
    // (vLLM's benchmark client reads the same variable).
    o.api_key = f.api_key;
    if (o.api_key.empty()) {
        if (const char* env = std::getenv("OPENAI_API_KEY"); env) o.api_key = env;
    }
    o.request_rate = parse_rate(f.request_rate);
    o.burstiness = f.burstiness;
    if (f.max_concurrency < 0)
        raise(ErrorCode::kInvalidArgument, "--max-concurrency must be >= 1; got {}", f.max_concurrency);
    if (f.max_concurrency > 0) o.max_concurrency = f.max_concurrency;
    o.ignore_eos = f.ignore_eos;
    o.seed = f.seed;
    o.request_timeout_s = f.request_timeout;

    if (!f.tokenizer.empty()) {
        c.tokenizer_dir = f.tokenizer;
    } else if (!f.model.empty() && std::filesystem::is_directory(f.model)) {
        c.tokenizer_dir = f.model;
    } else {
        raise(ErrorCode::kInvalidArgument,
              "--tokenizer DIR is needed (a folder with tokenizer.json, e.g. the model's) to build "
              "prompts and count tokens; --model '{}' is not a folder",
              f.model);
    }
    c.dataset_name = f.dataset_name;
    c.num_prompts = f.num_prompts;
    c.random = {.num_prompts = f.num_prompts,
                .input_len = f.random_input_len,
                .output_len = f.random_output_len,
                .range_ratio = f.random_range_ratio,
                .prefix_len = f.random_prefix_len,
                .seed = f.seed};
    c.sharegpt.path = f.dataset_path;
    c.sharegpt.seed = f.seed;
    if (f.sharegpt_output_len > 0) c.sharegpt.output_len = f.sharegpt_output_len;
    c.metrics.percentile_metrics = bench::parse_percentile_metrics(f.percentile_metrics);
    c.metrics.percentiles = bench::parse_metric_percentiles(f.metric_percentiles);
    c.metrics.goodput_slo_ms = bench::parse_goodput(f.goodput);
    c.disable_progress = f.disable_tqdm;
    c.save_result = f.save_result;
    c.result_dir = f.result_dir;
    c.result_filename = f.result_filename;
    if (f.pd_prefill_urls.empty() != f.pd_decode_urls.empty()) {
        raise(ErrorCode::kInvalidArgument, "the PD TTFT breakdown needs both --pd-prefill-url and --pd-decode-url");
    }
    for (const auto& u : f.pd_prefill_urls) c.pd_prefill.push_back(bench::parse_base_url(u));
    for (const auto& u : f.pd_decode_urls) c.pd_decode.push_back(bench::parse_base_url(u));
    return c;
}

void add_serve_flags(CLI::App* sub, BenchServeFlags& f) {
    sub->add_option("--backend", f.backend,
                    "openai (/v1/completions) | openai-chat (/v1/chat/completions) | vllm (= openai)")
        ->capture_default_str();
    sub->add_option("--base-url", f.base_url, "http://HOST:PORT[/PREFIX] (instead of --host/--port)");
    sub->add_option("--host", f.host, "server host")->capture_default_str();
    sub->add_option("--port", f.port, "server port")->capture_default_str();
    sub->add_option("--endpoint", f.endpoint, "API path (default: per --backend)");
    sub->add_option(
        "--model", f.model,
        "model name for requests (default: first of GET /v1/models); also the tokenizer folder if it is one");
    sub->add_option("--served-model-name", f.served_model_name, "the request's model field, if different from --model");
    sub->add_option("--tokenizer", f.tokenizer, "folder with tokenizer.json (default: --model)");
    sub->add_option("--dataset-name", f.dataset_name, "random | sharegpt")->capture_default_str();
    sub->add_option("--dataset-path", f.dataset_path, "ShareGPT-format JSON file");
    sub->add_option("--num-prompts", f.num_prompts, "number of requests")->capture_default_str();
    sub->add_option("--request-rate", f.request_rate, "requests/s (Poisson/gamma arrivals), or inf: all at once")
        ->capture_default_str();
    sub->add_option("--burstiness", f.burstiness, "gamma shape of the arrival gaps (1 = Poisson)")
        ->capture_default_str();
    sub->add_option("--max-concurrency", f.max_concurrency, "requests in flight at most (default: no limit)");
    sub->add_option("--seed", f.seed, "seed of prompts and arrivals")->capture_default_str();
    sub->add_flag("--ignore-eos", f.ignore_eos,
                  "send ignore_eos=true (vLLM extension): always generate the full length");
    sub->add_option("--random-input-len", f.random_input_len, "random: prompt tokens")->capture_default_str();
    sub->add_option("--random-output-len", f.random_output_len, "random: max tokens per request")
        ->capture_default_str();
    sub->add_option("--random-range-ratio", f.random_range_ratio,
                    "random: lengths uniform in [X(1-r), X(1+r)], r in [0, 1)")
        ->capture_default_str();
    sub->add_option("--random-prefix-len", f.random_prefix_len, "random: shared random prefix tokens")
        ->capture_default_str();
    sub->add_option("--sharegpt-output-len", f.sharegpt_output_len,
                    "sharegpt: max tokens instead of the reply's length");
    sub->add_option("--percentile-metrics", f.percentile_metrics, "comma-separated of ttft,tpot,itl,e2el")
        ->capture_default_str();
    sub->add_option("--metric-percentiles", f.metric_percentiles, "comma-separated percentiles, e.g. 25,50,99")
        ->capture_default_str();
    sub->add_option("--goodput", f.goodput,
                    "SLOs as KEY:VALUE in ms (ttft, tpot, e2el), e.g. --goodput ttft:500 tpot:50");
    sub->add_flag("--save-result", f.save_result, "write the result JSON");
    sub->add_option("--result-dir", f.result_dir, "folder for the result JSON (default: current)");
    sub->add_option("--result-filename", f.result_filename, "name of the result JSON (default: vLLM's pattern)");
    sub->add_flag("--disable-tqdm", f.disable_tqdm, "no progress bar");
    sub->add_option("--api-key", f.api_key, "sent as Authorization: Bearer KEY (default: env OPENAI_API_KEY)");
    sub->add_option("--pd-prefill-url", f.pd_prefill_urls,
                    "PD disaggregation: a prefill instance behind the proxy (http://HOST:PORT; with --pd-decode-url): "
                    "prints the TTFT broken into queue, prefill, KV transfer and first decode from their /metrics");
    sub->add_option("--pd-decode-url", f.pd_decode_urls, "PD disaggregation: a decode instance behind the proxy");
    sub->add_option("--request-timeout", f.request_timeout, "seconds per request before it fails")
        ->capture_default_str();
}

}  // namespace

void add_bench_command(CLI::App& app, Action* action) {
    CLI::App* bench = app.add_subcommand("bench", "Benchmarks (serve: the serving benchmark of vLLM)");
    bench->require_subcommand(1);
    auto flags = std::make_shared<BenchServeFlags>();
    CLI::App* sub =
        bench->add_subcommand("serve", "Benchmark an OpenAI-compatible server (vLLM benchmark_serving's metrics)");
    add_serve_flags(sub, *flags);
    sub->callback([flags, action] {
        *action = [flags] {
            bench::run_bench_serve(to_config(*flags), stdout);
            return 0;
        };
    });
}

}  // namespace moeserve::cli
