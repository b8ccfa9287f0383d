// `moeserve serve`'s options and its entry points (serve_command.cpp: one API server, or a
// --headless node; serve_multi.cpp: --api-server-count > 1).
#pragma once

#include <string>
#include <vector>

#include "moeserve/cli/serve_layout.h"
#include "moeserve/cli/vllm_flags.h"
#include "moeserve/serve/access_policy.h"
#include "moeserve/serve/http_server.h"

namespace moeserve::cli {

struct ServeOptions {
    EngineOptions engine;
    ParallelFlags parallel;
    std::vector<std::string> served_model_names;  // the first is reported
    std::string chat_template;                    // a file, or the template itself
    std::string root_path;
    bool enable_log_requests = false;     // vLLM's default: off
    bool disable_log_requests = false;    // vLLM's older flag; wins over --enable-log-requests
    int max_log_len = -1;                 // -1: prompts logged whole
    bool disable_log_stats = false;       // --disable-log-stats: no periodic stats line
    double log_stats_interval = 10;       // seconds (env VLLM_LOG_STATS_INTERVAL)
    bool disable_access_log = false;      // --disable-uvicorn-access-log
    int64_t responses_store_size = 1024;  // --responses-store-size
    // CORS (vLLM's flags: JSON lists; what was given, else the defaults).
    std::string allowed_origins, allowed_methods, allowed_headers;
    bool allow_credentials = false;
    int max_logprobs = 20;
    serve::HttpServerOptions::Tls tls;
    bool enable_auto_tool_choice = false;
    std::string tool_call_parser;
    std::string reasoning_parser;
    VllmFlags vllm;
    std::string host = "127.0.0.1";
    int port = 8000;
    serve::AccessPolicyConfig access;  // --api-key, --allowed-hosts, --forwarded-allow-ips (access_flags.h)
    bool trust_remote_code = false;
    int http_threads = 1;
    int api_workers = 4;
    int max_connections = 0;
    int max_choices_per_request = 256;
    int64_t max_request_body_bytes = 16 << 20;
    double drain_timeout = 30;
    double engine_ready_timeout = 600;
    double request_queue_timeout = 600;  // seconds; 0 = off
    int heartbeat_timeout_ms = 30000;
    double step_watchdog_timeout = -1;  // seconds; 0 = off, < 0 = half the heartbeat timeout
    std::string rank_plane_key_file;
    // An API server process of --api-server-count > 1 (hidden flags from its parent,
    // serve_multi.cpp): its index, the parent's run folder (engine sockets, ready and metrics
    // files), the port the parent reserved, and how often this index was started again after
    // its process died. index -1: not one (the parent or a single server).
    int api_server_index = -1;
    std::string api_server_run_dir;
    int api_server_port = 0;
    int api_server_restarts = 0;
};

// --api-server-count at most (each API server is a process with its own sockets per engine).
inline constexpr int kMaxApiServers = 64;

// The run folder of --api-server-count > 1 (the parent's $TMPDIR/moeserve-<pid>/, mode 0700),
// besides the engine sockets: server i writes its ready file once its engines answered and its
// metrics snapshot (serve::Metrics::write_snapshot) every half second; the parent appends to the
// engine event log what happens to the engines when a rank process exits (engine_notices.h).
inline std::string api_server_ready_file(const std::string& run_dir, int server) {
    return run_dir + "/api" + std::to_string(server) + ".ready";
}
inline std::string api_server_metrics_file(const std::string& run_dir, int server) {
    return run_dir + "/api" + std::to_string(server) + ".metrics";
}
// The parent's notices of its engines' fate, one line each (engine_notices.h).
inline std::string engine_event_log(const std::string& run_dir) { return run_dir + "/engines.events"; }

// --api-server-count > 1: this process supervises the ranks and the API server processes
// (docs/parallelism.md, "Several API servers"). Returns the exit status.
int run_api_servers(const ServeOptions& o, const Deployment& d);

}  // namespace moeserve::cli
