// Prometheus text exposition of the server's metrics (format 0.0.4).
#include "moeserve/serve/metrics.h"

#include <fmt/format.h>

namespace moeserve::serve {

namespace {
std::string& kernel_isa() {
    static std::string isa;
    return isa;
}
}  // namespace

void set_kernel_isa_info(const std::string& isa) { kernel_isa() = isa; }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
    size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    counts_[i]++;
    sum_ += value;
    count_++;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    int64_t cumulative = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
        cumulative += counts_[i];
        const std::string le = i < bounds_.size() ? fmt::format("{}", bounds_[i]) : "+Inf";
        out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, cumulative);
    }
    out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

Metrics::Metrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      tpot_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
             10.0, 20.0, 40.0, 80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
            120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {}

void Metrics::on_request_finished(const FinishedRequest& r) {
    std::lock_guard lock(mutex_);
    finished_by_reason_[r.finish_reason]++;
    prompt_tokens_ += r.num_prompt_tokens;
    generation_tokens_ += r.num_generation_tokens;
    if (r.num_generation_tokens > 0) ttft_.observe(r.ttft_s);
    if (r.num_generation_tokens > 1) {
        tpot_.observe((r.e2e_s - r.ttft_s) / static_cast<double>(r.num_generation_tokens - 1));
    }
    e2e_.observe(r.e2e_s);
}

void Metrics::on_http_status(int status) {
    std::lock_guard lock(mutex_);
    http_by_status_[status]++;
}

std::string Metrics::render(const std::vector<ipc::Stats>& engines, int num_in_flight) const {
    const std::string model = fmt::format("model_name=\"{}\"", model_name_);
    int64_t running = 0, waiting = 0, queries = 0, hits = 0, preemptions = 0;
    int64_t steps = 0, prefill_steps = 0, decode_steps = 0, dummy_steps = 0;
    std::string out;
    const auto head = [&](const char* name, const char* type, const char* help) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    for (const auto& s : engines) {
        running += s.num_running;
        waiting += s.num_waiting;
        queries += s.prefix_cache_queries;
        hits += s.prefix_cache_hits;
        preemptions += s.num_preemptions;
        steps += s.num_steps;
        prefill_steps += s.num_prefill_steps;
        decode_steps += s.num_decode_steps;
        dummy_steps += s.num_dummy_steps;
    }
    head("moeserve:num_requests_running", "gauge", "Requests in model execution batches.");
    out += fmt::format("moeserve:num_requests_running{{{}}} {}\n", model, running);
    head("moeserve:num_requests_waiting", "gauge", "Requests waiting to be scheduled.");
    out += fmt::format("moeserve:num_requests_waiting{{{}}} {}\n", model, waiting);
    head("moeserve:num_requests_in_flight", "gauge", "Requests the API server sent and not finished.");
    out += fmt::format("moeserve:num_requests_in_flight{{{}}} {}\n", model, num_in_flight);
    head("moeserve:kv_cache_usage_perc", "gauge", "KV cache usage per engine (1 = full).");
    for (const auto& s : engines) {
        out += fmt::format("moeserve:kv_cache_usage_perc{{{},engine=\"{}\"}} {}\n", model, s.engine_index, s.kv_cache_usage);
    }
    head("moeserve:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
    out += fmt::format("moeserve:prefix_cache_queries_total{{{}}} {}\n", model, queries);
    head("moeserve:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
    out += fmt::format("moeserve:prefix_cache_hits_total{{{}}} {}\n", model, hits);
    head("moeserve:prefix_cache_hit_rate", "gauge", "hits / queries since start.");
    out += fmt::format("moeserve:prefix_cache_hit_rate{{{}}} {}\n", model,
                       queries > 0 ? static_cast<double>(hits) / static_cast<double>(queries) : 0.0);
    head("moeserve:num_preemptions_total", "counter", "Requests preempted (recomputed).");
    out += fmt::format("moeserve:num_preemptions_total{{{}}} {}\n", model, preemptions);
    head("moeserve:engine_steps_total", "counter", "Engine steps by phase.");
    out += fmt::format("moeserve:engine_steps_total{{{},phase=\"prefill\"}} {}\n", model, prefill_steps);
    out += fmt::format("moeserve:engine_steps_total{{{},phase=\"decode\"}} {}\n", model, decode_steps);
    out += fmt::format("moeserve:engine_steps_total{{{},phase=\"dummy\"}} {}\n", model, dummy_steps);
    out += fmt::format("moeserve:engine_steps_total{{{},phase=\"all\"}} {}\n", model, steps);
    // Per DP engine (label engine = its DP rank); the families above are the totals.
    // One series per engine (label engine = its DP rank) of a Stats field.
    const auto per_engine = [&](const char* name, const char* type, const char* help, auto field) {
        head(name, type, help);
        for (const auto& s : engines) {
            out += fmt::format("{}{{{},engine=\"{}\"}} {}\n", name, model, s.engine_index, field(s));
        }
    };
    using S = const ipc::Stats&;
    per_engine("moeserve:engine_requests_running", "gauge", "Requests in model execution batches, per engine.",
               [](S s) { return s.num_running; });
    per_engine("moeserve:engine_requests_waiting", "gauge", "Requests waiting to be scheduled, per engine.",
               [](S s) { return s.num_waiting; });
    head("moeserve:engine_steps_by_engine_total", "counter", "Engine steps by phase, per engine (dummy: lock-step steps without work).");
    for (const auto& s : engines) {
        for (const auto& [phase, n] : {std::pair{"prefill", s.num_prefill_steps}, std::pair{"decode", s.num_decode_steps},
                                       std::pair{"dummy", s.num_dummy_steps}, std::pair{"all", s.num_steps}}) {
            out += fmt::format("moeserve:engine_steps_by_engine_total{{{},engine=\"{}\",phase=\"{}\"}} {}\n", model,
                               s.engine_index, phase, n);
        }
    }
    // DP lock-step / PD hybrid counters (engine/dp_coordinator.h); zero for a single engine.
    head("moeserve:dummy_steps_total", "counter", "Dummy forwards (no work of the agreed phase), per engine and phase.");
    for (const auto& s : engines) {
        for (const auto& [phase, n] : {std::pair{"prefill", s.num_dummy_prefill_steps},
                                       std::pair{"decode", s.num_dummy_decode_steps}}) {
            out += fmt::format("moeserve:dummy_steps_total{{{},engine=\"{}\",phase=\"{}\"}} {}\n", model,
                               s.engine_index, phase, n);
        }
    }
    per_engine("moeserve:guard_decode_steps_total", "counter", "Decode steps forced by the PD-hybrid starvation guard.",
               [](S s) { return s.num_guard_decode_steps; });
    per_engine("moeserve:decode_requests_stalled_total", "counter", "Sum over prefill steps of the decodes kept waiting.",
               [](S s) { return s.num_decode_requests_stalled; });
    per_engine("moeserve:dp_control_seconds_total", "counter", "Seconds in the per-step DP control collective.",
               [](S s) { return s.dp_control_seconds; });
    per_engine("moeserve:forward_seconds_total", "counter", "Seconds in forwards, MoE collectives included.",
               [](S s) { return s.forward_seconds; });
    head("moeserve:step_seconds_total", "counter",
         "Engine step time by part, per engine: schedule, prepare (ForwardBatch + block tables), forward "
         "(lm_head included), sample (logits -> tokens), update (scheduler outputs), output (IPC of the outputs).");
    for (const auto& s : engines) {
        for (const auto& [part, v] : {std::pair{"schedule", s.step_schedule_seconds}, std::pair{"prepare", s.step_prepare_seconds},
                                      std::pair{"forward", s.step_forward_seconds}, std::pair{"sample", s.step_sample_seconds},
                                      std::pair{"update", s.step_update_seconds}, std::pair{"output", s.step_output_seconds}}) {
            out += fmt::format("moeserve:step_seconds_total{{{},engine=\"{}\",part=\"{}\"}} {}\n", model, s.engine_index,
                               part, v);
        }
    }
    per_engine("moeserve:engine_generation_tokens_total", "counter", "Tokens sampled, per engine.",
               [](S s) { return s.num_generation_tokens; });

    std::lock_guard lock(mutex_);
    head("moeserve:request_success_total", "counter", "Finished requests by finish reason.");
    for (const char* reason : {"stop", "length", "abort", "error"}) {
        const auto it = finished_by_reason_.find(reason);
        out += fmt::format("moeserve:request_success_total{{{},finished_reason=\"{}\"}} {}\n", model,
                           reason, it == finished_by_reason_.end() ? 0 : it->second);
    }
    head("moeserve:http_responses_total", "counter", "HTTP answers by status code.");
    for (const auto& [status, n] : http_by_status_) {
        out += fmt::format("moeserve:http_responses_total{{{},status=\"{}\"}} {}\n", model, status, n);
    }
    head("moeserve:prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
    out += fmt::format("moeserve:prompt_tokens_total{{{}}} {}\n", model, prompt_tokens_);
    head("moeserve:generation_tokens_total", "counter", "Generated tokens of finished requests.");
    out += fmt::format("moeserve:generation_tokens_total{{{}}} {}\n", model, generation_tokens_);
    head("moeserve:time_to_first_token_seconds", "histogram", "Arrival to first token.");
    ttft_.render(out, "moeserve:time_to_first_token_seconds", model);
    head("moeserve:time_per_output_token_seconds", "histogram", "Mean time between tokens per request.");
    tpot_.render(out, "moeserve:time_per_output_token_seconds", model);
    head("moeserve:e2e_request_latency_seconds", "histogram", "Arrival to finish.");
    e2e_.render(out, "moeserve:e2e_request_latency_seconds", model);
    if (!kernel_isa().empty()) {
        head("moeserve:kernel_isa_info", "gauge", "The ISA level the CPU kernels run at (MOESERVE_ISA or the best found).");
        out += fmt::format("moeserve:kernel_isa_info{{isa=\"{}\"}} 1\n", kernel_isa());
    }
    return out;
}

}  // namespace moeserve::serve
