// Server metrics in the Prometheus text format (GET /metrics). What vLLM also reports has vLLM's
// name and labels (vllm:num_requests_running{model_name, engine}, vllm:time_to_first_token_seconds,
// ...: its Grafana dashboard and autoscalers work unchanged); what only this engine has (DP
// lock-step and PD-hybrid counters, HTTP statuses, in-flight requests, kernel ISA) is "moeserve:".
// A per-request histogram is one row of the table in metrics.cpp (name, help, buckets, what it
// observes of a FinishedRequest): its rendering, its observation and its share in a snapshot
// follow from the row.
#pragma once

#include <array>
#include <cstdint>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "moeserve/ipc/messages.h"

namespace moeserve::serve {

// One finished (engine) request, as the server saw it.
struct FinishedRequest {
    std::string finish_reason;  // "stop" | "length" | "abort" | "error"
    int64_t num_prompt_tokens = 0;
    int64_t num_generation_tokens = 0;
    double ttft_s = 0;             // arrival -> first token
    double e2e_s = 0;              // arrival -> finish
    double queue_s = 0;            // in the engine's queue before its first step
    double decode_s = 0;           // first token -> last token
    int32_t max_tokens_param = 0;  // the request's own max_tokens; 0 = not given
};

// Labels of vllm:cache_config_info (block_size, cache_dtype, enable_prefix_caching, ...).
using CacheConfigInfo = std::vector<std::pair<std::string, std::string>>;

class Histogram {
public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double value);
    // "sum count n0 n1 ..." (per-bucket counts) and back, added to this one; false (nothing
    // added) when the text does not fit these bounds.
    std::string serialize() const;
    bool add_serialized(const std::string& text);
    // Lines "<name>_bucket{le=...}", "_sum", "_count" with labels (e.g. model_name="x").
    void render(std::string& out, const std::string& name, const std::string& labels) const;

private:
    std::vector<double> bounds_;
    std::vector<int64_t> counts_;  // per bucket (not cumulative), last = +Inf
    double sum_ = 0;
    int64_t count_ = 0;
};

// The CPU kernels' ISA level ("avx512"), set once by the CLI before serving (serve does not see
// kernels); rendered as moeserve:kernel_isa_info{isa="..."} 1 when set.
void set_kernel_isa_info(const std::string& isa);

class Metrics {
public:
    Metrics(std::string model_name, int64_t max_model_len = 4096, CacheConfigInfo cache_config = {});
    // Thread-safe.
    void on_request_finished(const FinishedRequest& request);
    // The gap between a request's consecutive outputs (vllm:inter_token_latency_seconds). Thread-safe.
    void on_inter_token(double seconds);
    // Counts an HTTP answer by status code. Thread-safe.
    void on_http_status(int status);
    // A dead rank was started again (self-healing; moeserve:group_restarts_total). Thread-safe.
    void on_group_restart() { ++group_restarts_; }
    // The exposition text, with the engines' latest stats. Thread-safe.
    std::string render(const std::vector<ipc::Stats>& engines, int num_in_flight) const;

    // Several API servers (--api-server-count): this is server `index`; write_snapshot() saves its
    // request and HTTP counts to own_path, and render() then shows the sums over its own counts
    // and the latest snapshots at other_paths (a missing or unreadable one counts as zero), plus
    // moeserve:api_server_requests_total per server. The engine series need no sum: every engine
    // sends its stats to every server. Call before serving.
    // A server started again in place of a dead one (restarts > 0: how often this index was)
    // continues from the dead process's last snapshot at own_path, so the sums never go back;
    // moeserve:api_server_restarts_total sums every index's restarts.
    void share(int index, std::string own_path, std::vector<std::string> other_paths, int64_t restarts = 0);
    // Writes this server's counts (and num_in_flight) to own_path atomically. Thread-safe.
    void write_snapshot(int num_in_flight) const;

private:
    std::string snapshot(int num_in_flight) const;
    // Adds a snapshot's counts to this one's; false (nothing added) when malformed.
    bool add_snapshot(const std::string& text, int64_t& num_in_flight, int64_t& num_finished);
    std::string render_local(const std::vector<ipc::Stats>& engines, int64_t num_in_flight) const;

    std::string model_name_;
    CacheConfigInfo cache_config_;
    mutable std::mutex mutex_;
    std::map<std::string, int64_t> finished_by_reason_;
    std::map<int, int64_t> http_by_status_;
    std::vector<Histogram> histograms_;  // per request: one per row of metrics.cpp's table, in its order
    size_t inter_token_ = 0;             // the one on_inter_token feeds
    int64_t max_model_len_ = 0;
    std::atomic<int64_t> group_restarts_{0};
    int64_t api_server_restarts_ = 0;  // share(): how often this server's index was started again
    int share_index_ = -1;             // share(): this server's index; -1 = not shared
    std::string own_path_;
    std::vector<std::string> other_paths_;
};

}  // namespace moeserve::serve
