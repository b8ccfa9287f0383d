// Prometheus text exposition of the server's metrics (format 0.0.4).
#include "moeserve/serve/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <variant>

namespace moeserve::serve {

namespace {
std::string& kernel_isa() {
    static std::string isa;
    return isa;
}
}  // namespace

void set_kernel_isa_info(const std::string& isa) { kernel_isa() = isa; }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
    size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    counts_[i]++;
    sum_ += value;
    count_++;
}

std::string Histogram::serialize() const {
    std::string out = fmt::format("{} {}", sum_, count_);
    for (const int64_t n : counts_) out += fmt::format(" {}", n);
    return out;
}

bool Histogram::add_serialized(const std::string& text) {
    std::istringstream in(text);
    double sum = 0;
    int64_t count = 0;
    if (!(in >> sum >> count)) return false;
    std::vector<int64_t> counts(counts_.size());
    for (auto& n : counts)
        if (!(in >> n)) return false;
    std::string extra;
    if (in >> extra) return false;
    for (size_t i = 0; i < counts.size(); ++i) counts_[i] += counts[i];
    sum_ += sum;
    count_ += count;
    return true;
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

namespace {

// vLLM's 1-2-5 buckets up to max: 1, 2, 5, 10, 20, 50, ...
std::vector<double> one_two_five(int64_t max) {
    std::vector<double> out;
    for (double base = 1;; base *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
            if (base * m > static_cast<double>(max)) return out;
            out.push_back(base * m);
        }
    }
}

// vLLM's buckets of the per-request latencies (e2e, queue, prefill, decode, inference).
std::vector<double> request_latency_buckets(int64_t) {
    return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::vector<double> ttft_buckets(int64_t) {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
            1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> token_latency_buckets(int64_t) {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

// vLLM's phases: prefill = scheduled -> first token, decode = first -> last token, inference =
// both. Here "scheduled" is arrival + the engine's queue time, and arrival is the API server's
// (before tokenization), so prefill includes the server's share.
double prefill_seconds(const FinishedRequest& r) { return std::max(0.0, r.ttft_s - r.queue_s); }

using Observed = std::optional<double>;

// The per-request histograms, one row each (its place here is its place in /metrics and in a
// snapshot): vLLM's name and help, its buckets, and what it observes of a finished request
// (nullopt: nothing, e.g. the TTFT of a request that generated no token). The inter-token
// latency has no `observe`: on_inter_token feeds it.
struct RequestHistogram {
    const char* name;
    const char* help;
    std::vector<double> (*bounds)(int64_t max_model_len);
    Observed (*observe)(const FinishedRequest& r);
};

const std::vector<RequestHistogram>& request_histograms() {
    using R = const FinishedRequest&;
    static const std::vector<RequestHistogram> rows = {
        {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_buckets,
         [](R r) { return r.num_generation_tokens > 0 ? Observed(r.ttft_s) : std::nullopt; }},
        {"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", token_latency_buckets,
         nullptr},
        {"vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds (per request).",
         token_latency_buckets,
         [](R r) {
             return r.num_generation_tokens > 1
                        ? Observed((r.e2e_s - r.ttft_s) / static_cast<double>(r.num_generation_tokens - 1))
                        : std::nullopt;
         }},
        {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", request_latency_buckets,
         [](R r) { return Observed(r.e2e_s); }},
        {"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
         request_latency_buckets, [](R r) { return r.num_generation_tokens > 0 ? Observed(r.queue_s) : std::nullopt; }},
        {"vllm:request_prompt_tokens", "Number of prefill tokens processed.", one_two_five,
         [](R r) { return Observed(static_cast<double>(r.num_prompt_tokens)); }},
        {"vllm:request_generation_tokens", "Number of generation tokens processed.", one_two_five,
         [](R r) { return Observed(static_cast<double>(r.num_generation_tokens)); }},
        {"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
         request_latency_buckets,
         [](R r) { return r.num_generation_tokens > 0 ? Observed(prefill_seconds(r)) : std::nullopt; }},
        {"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
         request_latency_buckets,
         [](R r) { return r.num_generation_tokens > 0 ? Observed(r.decode_s) : std::nullopt; }},
        {"vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
         request_latency_buckets,
         [](R r) { return r.num_generation_tokens > 0 ? Observed(prefill_seconds(r) + r.decode_s) : std::nullopt; }},
        {"vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", one_two_five,
         [](R r) { return r.max_tokens_param > 0 ? Observed(static_cast<double>(r.max_tokens_param)) : std::nullopt; }},
    };
    return rows;
}

}  // namespace

Metrics::Metrics(std::string model_name, int64_t max_model_len, CacheConfigInfo cache_config)
    : model_name_(std::move(model_name)), cache_config_(std::move(cache_config)), max_model_len_(max_model_len) {
    for (const RequestHistogram& row : request_histograms()) {
        if (row.observe == nullptr) inter_token_ = histograms_.size();
        histograms_.emplace_back(row.bounds(max_model_len));
    }
}

void Metrics::share(int index, std::string own_path, std::vector<std::string> other_paths, int64_t restarts) {
    share_index_ = index;
    own_path_ = std::move(own_path);
    other_paths_ = std::move(other_paths);
    if (restarts > 0) {
        std::ifstream in(own_path_);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        int64_t dead_in_flight = 0, finished = 0;  // the dead process's in-flight requests are gone
        add_snapshot(text, dead_in_flight, finished);
    }
    api_server_restarts_ = restarts;  // not the dead process's count, which this one continues
}

// One line per item: "in_flight N", "reason R N", "status S N", "histogram I <serialized>".
std::string Metrics::snapshot(int num_in_flight) const {
    std::lock_guard lock(mutex_);
    std::string out = fmt::format("in_flight {}\n", num_in_flight);
    if (api_server_restarts_ > 0) out += fmt::format("restarts {}\n", api_server_restarts_);
    for (const auto& [reason, n] : finished_by_reason_) out += fmt::format("reason {} {}\n", reason, n);
    for (const auto& [status, n] : http_by_status_) out += fmt::format("status {} {}\n", status, n);
    for (size_t i = 0; i < histograms_.size(); ++i) {
        out += fmt::format("histogram {} {}\n", i, histograms_[i].serialize());
    }
    return out;
}

bool Metrics::add_snapshot(const std::string& text, int64_t& num_in_flight, int64_t& num_finished) {
    // Parsed whole into a scratch copy first, so a malformed snapshot adds nothing.
    Metrics parsed(model_name_, max_model_len_);
    int64_t in_flight = 0, finished = 0;
    std::istringstream lines(text);
    std::string line;
    std::vector<Histogram>& hists = parsed.histograms_;
    while (std::getline(lines, line)) {
        std::istringstream in(line);
        std::string kind;
        in >> kind;
        if (kind == "in_flight") {
            if (!(in >> in_flight)) return false;
        } else if (kind == "restarts") {
            if (!(in >> parsed.api_server_restarts_)) return false;
        } else if (kind == "reason") {
            std::string reason;
            int64_t n = 0;
            if (!(in >> reason >> n)) return false;
            parsed.finished_by_reason_[reason] += n;
            finished += n;
        } else if (kind == "status") {
            int status = 0;
            int64_t n = 0;
            if (!(in >> status >> n)) return false;
            parsed.http_by_status_[status] += n;
        } else if (kind == "histogram") {
            size_t i = 0;
            if (!(in >> i) || i >= hists.size()) return false;
            std::string rest;
            std::getline(in, rest);
            if (!hists[i].add_serialized(rest)) return false;
        } else if (!kind.empty()) {
            return false;
        }
    }
    std::lock_guard lock(mutex_);
    for (const auto& [reason, n] : parsed.finished_by_reason_) finished_by_reason_[reason] += n;
    for (const auto& [status, n] : parsed.http_by_status_) http_by_status_[status] += n;
    for (size_t i = 0; i < histograms_.size(); ++i) histograms_[i].add_serialized(hists[i].serialize());
    api_server_restarts_ += parsed.api_server_restarts_;
    num_in_flight += in_flight;
    num_finished += finished;
    return true;
}

void Metrics::write_snapshot(int num_in_flight) const {
    if (share_index_ < 0) return;
    const std::string tmp = own_path_ + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << snapshot(num_in_flight);
        if (!out) return;  // a full disk: the others keep the previous snapshot
    }
    std::rename(tmp.c_str(), own_path_.c_str());
}

void Metrics::on_request_finished(const FinishedRequest& r) {
    std::lock_guard lock(mutex_);
    finished_by_reason_[r.finish_reason]++;
    const std::vector<RequestHistogram>& rows = request_histograms();
    for (size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].observe == nullptr) continue;
        if (const Observed value = rows[i].observe(r)) histograms_[i].observe(*value);
    }
}

void Metrics::on_inter_token(double seconds) {
    std::lock_guard lock(mutex_);
    histograms_[inter_token_].observe(seconds);
}

void Metrics::on_http_status(int status) {
    std::lock_guard lock(mutex_);
    http_by_status_[status]++;
}

std::string Metrics::render(const std::vector<ipc::Stats>& engines, int num_in_flight) const {
    if (share_index_ < 0) return render_local(engines, num_in_flight);
    // The sums over every API server: own counts (live) plus the others' latest snapshots.
    Metrics sum(model_name_, max_model_len_, cache_config_);
    sum.group_restarts_ = group_restarts_.load();  // every server hears of every restart: not summed
    int64_t in_flight = 0;
    const size_t num_servers = other_paths_.size() + 1;
    std::vector<int64_t> finished(num_servers, 0);
    int64_t own_finished = 0;
    sum.add_snapshot(snapshot(num_in_flight), in_flight, own_finished);
    size_t other = 0;
    for (size_t i = 0; i < num_servers; ++i) {
        if (static_cast<int>(i) == share_index_) {
            finished[i] = own_finished;
            continue;
        }
        std::ifstream in(other_paths_[other++]);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        sum.add_snapshot(text, in_flight, finished[i]);
    }
    std::string out = sum.render_local(engines, in_flight);
    out +=
        "# HELP moeserve:api_server_requests_total Engine requests finished, per API server (--api-server-count).\n"
        "# TYPE moeserve:api_server_requests_total counter\n";
    for (size_t i = 0; i < num_servers; ++i) {
        out += fmt::format("moeserve:api_server_requests_total{{model_name=\"{}\",api_server=\"{}\"}} {}\n",
                           model_name_, i, finished[i]);
    }
    out += fmt::format(
        "# HELP moeserve:api_server_restarts_total API server processes started again after one died "
        "(--api-server-count).\n"
        "# TYPE moeserve:api_server_restarts_total counter\n"
        "moeserve:api_server_restarts_total{{model_name=\"{}\"}} {}\n",
        model_name_, sum.api_server_restarts_);
    return out;
}

namespace {
// EPLB (--enable-eplb), only when an engine runs it: the figures of its last placement decision
// (every engine of the EP group computes the same) and what it moved.
void render_eplb(std::string& out, const std::vector<ipc::Stats>& engines, const std::string& model) {
    const bool any =
        std::any_of(engines.begin(), engines.end(), [](const ipc::Stats& s) { return !s.eplb_rank_load.empty(); });
    if (!any) return;
    out +=
        "# HELP moeserve:eplb_expert_load Routed tokens each EP rank's expert slots served in the last EPLB window "
        "(all MoE layers).\n# TYPE moeserve:eplb_expert_load gauge\n";
    for (const auto& s : engines) {
        for (size_t r = 0; r < s.eplb_rank_load.size(); ++r) {
            out += fmt::format("moeserve:eplb_expert_load{{{},engine=\"{}\",ep_rank=\"{}\"}} {}\n", model,
                               s.engine_index, r, s.eplb_rank_load[r]);
        }
    }
    const auto gauge = [&](const char* name, const char* type, const char* help, auto field) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
        for (const auto& s : engines) {
            if (s.eplb_rank_load.empty()) continue;
            out += fmt::format("{}{{{},engine=\"{}\"}} {}\n", name, model, s.engine_index, field(s));
        }
    };
    using S = const ipc::Stats&;
    gauge("moeserve:eplb_imbalance_ratio", "gauge",
          "Busiest EP rank's routed tokens over the mean, summed over MoE layers, at the last EPLB decision (0: none "
          "yet).",
          [](S s) { return s.eplb_imbalance; });
    gauge("moeserve:eplb_decisions_total", "counter", "EPLB placement decisions (every step_interval forwards).",
          [](S s) { return s.eplb_decisions; });
    gauge("moeserve:eplb_rebalances_total", "counter", "EPLB moves completed (a new placement on every EP rank).",
          [](S s) { return s.eplb_rebalances; });
    gauge("moeserve:eplb_moved_experts_total", "counter", "Expert slots (all EP ranks) that EPLB loaded anew.",
          [](S s) { return s.eplb_moved_experts; });
}
}  // namespace

namespace {

using StatsField =
    std::variant<int32_t ipc::Stats::*, int64_t ipc::Stats::*, float ipc::Stats::*, double ipc::Stats::*>;

std::string field_text(const ipc::Stats& s, const StatsField& field) {
    return std::visit([&s](auto member) { return fmt::format("{}", s.*member); }, field);
}

// A family with one series per engine (label engine = its DP rank) of a Stats field.
struct EngineSeries {
    const char* name;
    const char* type;
    const char* help;
    StatsField field;
};

// A family with one series per engine and label value, each a Stats field.
struct LabeledEngineSeries {
    const char* name;
    const char* type;
    const char* help;
    const char* label;
    std::vector<std::pair<const char*, StatsField>> values;
};

// Adding a per-engine series is one row here, besides its Stats field (which the engine fills
// and the ipc codec carries). vLLM's families first, then ours.
const std::vector<EngineSeries>& engine_series() {
    using S = ipc::Stats;
    static const std::vector<EngineSeries> rows = {
        {"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", &S::num_running},
        {"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", &S::num_waiting},
        {"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", &S::kv_cache_usage},
        {"vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
         &S::prefix_cache_queries},
        {"vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
         &S::prefix_cache_hits},
        {"vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
         &S::num_preemptions},
        {"vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", &S::num_prompt_tokens},
        {"vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         &S::num_generation_tokens},
        // Speculative decoding (--speculative-config); zero without it.
        {"vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", &S::spec_num_drafts},
        {"vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", &S::spec_num_draft_tokens},
        {"vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
         &S::spec_num_accepted_tokens},
        {"moeserve:spec_decode_draft_budget", "gauge",
         "Tokens a sequence may draft in a step now (the adaptive rule; num_speculative_tokens when off).",
         &S::spec_draft_budget},
        // DP lock-step / PD hybrid counters (engine/dp_coordinator.h); zero for a single engine.
        {"moeserve:guard_decode_steps_total", "counter", "Decode steps forced by the PD-hybrid starvation guard.",
         &S::num_guard_decode_steps},
        {"moeserve:decode_requests_stalled_total", "counter", "Sum over prefill steps of the decodes kept waiting.",
         &S::num_decode_requests_stalled},
        {"moeserve:dp_control_seconds_total", "counter", "Seconds in the per-step DP control collective.",
         &S::dp_control_seconds},
        {"moeserve:forward_seconds_total", "counter", "Seconds in forwards, MoE collectives included.",
         &S::forward_seconds},
        // PD disaggregation (engine/kv_transfer/); zero without --kv-transfer-config.
        {"moeserve:kv_wait_seconds_total", "counter",
         "Decode instance: seconds requests waited from admission until their KV had arrived.", &S::kv_wait_seconds},
        {"moeserve:kv_held_requests", "gauge", "Prefill instance: finished requests holding KV for a consumer.",
         &S::kv_held_transfers},
        {"moeserve:kv_waiting_requests", "gauge", "Decode instance: requests waiting for their KV.",
         &S::kv_waiting_requests},
    };
    return rows;
}

// Per-engine families with a label (phase, part, role), one row each.
const std::vector<LabeledEngineSeries>& labeled_engine_series() {
    using S = ipc::Stats;
    static const std::vector<LabeledEngineSeries> rows = {
        {"moeserve:engine_steps_total",
         "counter",
         "Engine steps by phase, per engine (dummy: lock-step steps without work).",
         "phase",
         {{"prefill", &S::num_prefill_steps},
          {"decode", &S::num_decode_steps},
          {"dummy", &S::num_dummy_steps},
          {"all", &S::num_steps}}},
        // DP lock-step / PD hybrid counters (engine/dp_coordinator.h); zero for a single engine.
        {"moeserve:dummy_steps_total",
         "counter",
         "Dummy forwards (no work of the agreed phase), per engine and phase.",
         "phase",
         {{"prefill", &S::num_dummy_prefill_steps}, {"decode", &S::num_dummy_decode_steps}}},
        {"moeserve:step_seconds_total",
         "counter",
         "Engine step time by part, per engine: schedule, prepare (ForwardBatch + block tables), forward "
         "(lm_head included), sample (logits -> tokens), update (scheduler outputs), output (IPC of the outputs).",
         "part",
         {{"schedule", &S::step_schedule_seconds},
          {"prepare", &S::step_prepare_seconds},
          {"forward", &S::step_forward_seconds},
          {"sample", &S::step_sample_seconds},
          {"update", &S::step_update_seconds},
          {"output", &S::step_output_seconds}}},
        // PD disaggregation (engine/kv_transfer/): zero without --kv-transfer-config. role="producer":
        // KV this prefill instance sent; role="consumer": KV this decode instance fetched.
        {"moeserve:kv_transfer_bytes_total",
         "counter",
         "KV cache bytes sent (producer) or fetched (consumer).",
         "role",
         {{"producer", &S::kv_sent_bytes}, {"consumer", &S::kv_received_bytes}}},
        {"moeserve:kv_transfers_total",
         "counter",
         "Requests whose KV was sent (producer) or fetched (consumer).",
         "role",
         {{"producer", &S::kv_sent_transfers}, {"consumer", &S::kv_received_transfers}}},
        {"moeserve:kv_transfer_seconds_total",
         "counter",
         "Seconds moving KV: from a fetch's arrival to its last block sent (producer), from the fetch request "
         "to the last block written (consumer); divide by moeserve:kv_transfers_total for the time per request.",
         "role",
         {{"producer", &S::kv_send_seconds}, {"consumer", &S::kv_receive_seconds}}},
        {"moeserve:kv_transfer_failures_total",
         "counter",
         "Transfers held but never fetched within hold_ms (producer) or failed (consumer).",
         "role",
         {{"producer", &S::kv_expired_transfers}, {"consumer", &S::kv_failed_transfers}}},
    };
    return rows;
}

void render_head(std::string& out, const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void render_engine_series(std::string& out, const std::vector<ipc::Stats>& engines, const std::string& model) {
    for (const EngineSeries& row : engine_series()) {
        render_head(out, row.name, row.type, row.help);
        for (const auto& s : engines) {
            out +=
                fmt::format("{}{{{},engine=\"{}\"}} {}\n", row.name, model, s.engine_index, field_text(s, row.field));
        }
    }
    for (const LabeledEngineSeries& row : labeled_engine_series()) {
        render_head(out, row.name, row.type, row.help);
        for (const auto& s : engines) {
            for (const auto& [value, field] : row.values) {
                out += fmt::format("{}{{{},engine=\"{}\",{}=\"{}\"}} {}\n", row.name, model, s.engine_index, row.label,
                                   value, field_text(s, field));
            }
        }
    }
}

// The per-engine families whose series are lists: accepted drafts by position, tokens per step.
void render_engine_lists(std::string& out, const std::vector<ipc::Stats>& engines, const std::string& model) {
    render_head(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
                "Accepted tokens per draft position.");
    for (const auto& s : engines) {
        for (size_t pos = 0; pos < s.spec_num_accepted_tokens_per_pos.size(); ++pos) {
            out += fmt::format(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total{{{},engine=\"{}\",position=\"{}\"}} {}\n", model,
                s.engine_index, pos, s.spec_num_accepted_tokens_per_pos[pos]);
        }
    }
    render_head(out, "vllm:iteration_tokens_total", "histogram", "Histogram of number of tokens per engine_step.");
    for (const auto& s : engines) {
        int64_t cumulative = 0, count = 0;
        for (int64_t n : s.iteration_token_steps) count += n;
        const size_t num_bounds = std::size(ipc::kIterationTokenBuckets);
        for (size_t b = 0; b <= num_bounds; ++b) {
            if (b < s.iteration_token_steps.size()) cumulative += s.iteration_token_steps[b];
            const std::string le = b < num_bounds ? std::to_string(ipc::kIterationTokenBuckets[b]) : "+Inf";
            out += fmt::format("vllm:iteration_tokens_total_bucket{{{},engine=\"{}\",le=\"{}\"}} {}\n", model,
                               s.engine_index, le, cumulative);
        }
        out += fmt::format("vllm:iteration_tokens_total_sum{{{},engine=\"{}\"}} {}\n", model, s.engine_index,
                           s.iteration_tokens_sum);
        out += fmt::format("vllm:iteration_tokens_total_count{{{},engine=\"{}\"}} {}\n", model, s.engine_index, count);
    }
}

}  // namespace

std::string Metrics::render_local(const std::vector<ipc::Stats>& engines, int64_t num_in_flight) const {
    const std::string model = fmt::format("model_name=\"{}\"", model_name_);
    std::string out;
    render_engine_series(out, engines, model);
    render_engine_lists(out, engines, model);
    if (!cache_config_.empty()) {
        render_head(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
        std::string labels;
        for (const auto& [k, v] : cache_config_) labels += fmt::format("{}=\"{}\",", k, v);
        out += fmt::format("vllm:cache_config_info{{{}{}}} 1\n", labels, model);
    }
    {
        std::lock_guard lock(mutex_);
        render_head(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
        for (const ipc::FinishReason r : ipc::kFinishReasons) {
            const char* reason = ipc::finish_reason_name(r);
            const auto it = finished_by_reason_.find(reason);
            out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", model, reason,
                               it == finished_by_reason_.end() ? 0 : it->second);
        }
        const std::vector<RequestHistogram>& rows = request_histograms();
        for (size_t i = 0; i < rows.size(); ++i) {
            render_head(out, rows[i].name, "histogram", rows[i].help);
            histograms_[i].render(out, rows[i].name, model);
        }
        // Ours.
        render_head(out, "moeserve:http_responses_total", "counter", "HTTP answers by status code.");
        for (const auto& [status, n] : http_by_status_) {
            out += fmt::format("moeserve:http_responses_total{{{},status=\"{}\"}} {}\n", model, status, n);
        }
    }
    render_head(out, "moeserve:group_restarts_total", "counter",
                "Dead rank processes started again, their group re-formed (--max-rank-restarts).");
    out += fmt::format("moeserve:group_restarts_total{{{}}} {}\n", model, group_restarts_.load());
    render_head(out, "moeserve:num_requests_in_flight", "gauge", "Requests the API server sent and not finished.");
    out += fmt::format("moeserve:num_requests_in_flight{{{}}} {}\n", model, num_in_flight);
    render_eplb(out, engines, model);
    if (!kernel_isa().empty()) {
        render_head(out, "moeserve:kernel_isa_info", "gauge",
                    "The ISA level the CPU kernels run at (MOESERVE_ISA or the best found).");
        out += fmt::format("moeserve:kernel_isa_info{{isa=\"{}\"}} 1\n", kernel_isa());
    }
    return out;
}

}  // namespace moeserve::serve
