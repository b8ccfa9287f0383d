// `moeserve serve`: the API server process plus its rank processes (docs/architecture.md, "Processes"), with
// vllm serve's flags. One rank process per local (dp_rank, tp_rank); the head also hosts the
// rendezvous store and the ZeroMQ sockets every DP group's engine connects to; `--headless` nodes
// run only their ranks. SIGTERM drains and exits 0. The rank process itself: rank_command.cpp.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "moeserve/cli/model_files.h"
#include "moeserve/cli/access_flags.h"
#include "moeserve/cli/commands.h"
#include "moeserve/cli/engine_flags.h"
#include "moeserve/cli/serve_command.h"
#include "moeserve/cli/rank_group.h"
#include "moeserve/cli/rank_supervisor.h"
#include "moeserve/cli/serve_processes.h"
#include "moeserve/cli/generation_config.h"
#include "moeserve/cli/kv_transfer_config.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/cli/vllm_flags.h"
#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/ipc/auth.h"
#include "moeserve/model/kv_cache.h"
#include "moeserve/model/registry.h"
#include "moeserve/parallel/layout.h"
#include "moeserve/parallel/rendezvous.h"
#include "moeserve/serve/engine_client.h"
#include "moeserve/serve/openai/reasoning_parser.h"
#include "moeserve/serve/openai/tool_parser.h"
#include "moeserve/serve/http_server.h"
#include "moeserve/serve/metrics.h"
#include "moeserve/serve/routes.h"
#include "moeserve/serve/stats_log.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

namespace {

// vLLM's list flags (--allowed-origins '["*"]'): a JSON list of strings.
std::vector<std::string> json_string_list(const char* flag, const std::string& text) {
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    std::vector<std::string> out;
    if (j.is_array()) {
        for (const auto& v : j) {
            if (!v.is_string()) break;
            out.push_back(v.get<std::string>());
        }
    }
    if (!j.is_array() || out.size() != j.size()) {
        raise(ErrorCode::kInvalidArgument, "{}: expected a JSON list of strings such as '[\"*\"]'; got '{}'", flag,
              text);
    }
    return out;
}

// --chat-template, as vLLM reads it: a file's path, else the template text itself. A value with
// none of Jinja's characters ({, }, a newline) that does not open is a mistyped path: used as the
// template it would render every chat as that constant text, messages dropped (vLLM refuses it
// too).
std::string chat_template_of_flag(const std::string& value) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(value, ec)) return read_text_file(value);
    if (value.find_first_of("{}\n") == std::string::npos) {
        raise(ErrorCode::kNotFound,
              "--chat-template '{}' looks like a file path, but no such file opens (a template itself has Jinja's "
              "{{{{ }}}} or {{% %}})",
              value);
    }
    return value;
}

// vLLM's periodic stats lines (serve/stats_log.h), written by the first API server only (every
// engine reports to each of them): on unless --disable-log-stats.
class PeriodicStats {
public:
    PeriodicStats(const ServeOptions& o, int server_index, Logger& logger)
        : on_(!o.disable_log_stats && server_index == 0),
          interval_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(o.log_stats_interval))),
          next_(std::chrono::steady_clock::now() + interval_),
          log_(seconds(std::chrono::steady_clock::now())),
          logger_(logger) {}
    void log_if_due(const std::vector<ipc::Stats>& engines) {
        const auto now = std::chrono::steady_clock::now();
        if (!on_ || now < next_) return;
        next_ = now + interval_;
        for (const auto& line : log_.lines(engines, seconds(now))) {
            if (line.idle)
                MOESERVE_LOG_D(logger_, "stats", "%s", line.text.c_str());
            else
                MOESERVE_LOG_I(logger_, "stats", "%s", line.text.c_str());
        }
    }

private:
    static double seconds(std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(t.time_since_epoch()).count();
    }
    bool on_;
    std::chrono::steady_clock::duration interval_;
    std::chrono::steady_clock::time_point next_;
    serve::StatsLog log_;
    Logger& logger_;
};

// ---- a --headless node: only ranks ----

// Whether this node was lost and is started again (its process and ranks died, e.g. the machine
// rebooted, and its supervisor started it): with self-healing its first rank already joined a
// group generation (the head's store says so), so its ranks replace the lost ones (--rejoin)
// where the survivors re-form. A store that cannot be reached: a first start.
bool node_was_lost(const Deployment& d, Logger& logger) {
    if (!d.self_healing()) return false;
    try {
        const int first_rank = d.start * d.sizes.tp;
        if (parallel::last_generation(d.address, d.rpc_port, first_rank, std::chrono::milliseconds(2000)) < 0)
            return false;
    } catch (const Error& e) {
        MOESERVE_LOG_D(logger, "api", "the head's store: %s; starting fresh", e.what());
        return false;
    }
    MOESERVE_LOG_W(logger, "api", "this node's ranks were in a group before: they rejoin it");
    return true;
}

int run_headless(const ServeOptions& o, const Deployment& d) {
    Logger logger(fmt::format("node dp{}..{}", d.start, d.start + d.local - 1), parse_log_level(o.engine.log_level));
    SignalWatcher signals;
    RankProcesses ranks(environment_with(ipc::kRankPlaneKeyEnv, rank_plane_key(o, d)));
    RankSupervisor supervisor(d, ranks, logger);  // restarts dead ranks, or stops what needs them
    std::thread watcher;
    ScopeExit cleanup([&] {
        ranks.kill_all();
        if (watcher.joinable()) watcher.join();
    });
    spawn_local_ranks(ranks, o.engine, d, d.rpc_port, "", logger, node_was_lost(d, logger));
    watcher = std::thread([&] { ranks.watch([&](const RankProcesses::Rank& r) { supervisor.on_exit(r); }); });
    signals.start();
    // The ranks leave when the head shuts the deployment down; a signal here stops them at once
    // (there is nothing to drain on a node without the API server).
    std::vector<int> local_ranks;
    for (int r = d.start * d.sizes.tp; r < (d.start + d.local) * d.sizes.tp; ++r) local_ranks.push_back(r);
    while (!(ranks.all_exited() && (supervisor.done() || !d.self_healing()))) {
        if (signals.wait_beyond(0, std::chrono::milliseconds(100)) > 0) {
            MOESERVE_LOG_I(logger, "api", "signal %d: stopping the ranks", signals.last());
            ranks.kill_all();
            break;
        }
        if (d.self_healing() && !supervisor.is_serving()) {
            try {
                if (ranks_loaded(d.address, d.rpc_port, local_ranks, std::chrono::milliseconds(1000))) {
                    supervisor.serving();
                    MOESERVE_LOG_I(logger, "api", "this node's ranks are up: a rank that dies is restarted");
                }
            } catch (const Error& e) {
                MOESERVE_LOG_D(logger, "api", "the head's store: %s; asking again", e.what());
            }
        }
        supervisor.check_health();
    }
    return supervisor.failures() > 0 ? 1 : 0;
}

// ---- the API server ----

// After the stop signal: the router refuses new requests (503), and this waits for the requests
// in flight to finish and their answers to be sent (at most drain_timeout,
// or until a second signal), then aborts the rest and gives their answers a moment to go out.
// The engines' count alone is not enough: a request leaves it before its last bytes are written.
void drain(const ServeOptions& o, serve::Router& router, serve::EngineClient& engines, const serve::HttpServer& server,
           SignalWatcher& signals, Logger& logger) {
    MOESERVE_LOG_I(logger, "api", "signal %d: draining (up to %.0f s; a second signal stops at once)", signals.last(),
                   o.drain_timeout);
    // The listener stays open until exit: a client that connects during the drain gets the
    // router's 503 ("shutting down") instead of a reset from a closed listener's backlog.
    router.set_draining();
    const int seen = signals.count();
    const auto unfinished = [&] { return engines.num_in_flight() > 0 || server.num_unfinished_answers() > 0; };
    const auto drain_end = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.drain_timeout);
    while (unfinished() && std::chrono::steady_clock::now() < drain_end) {
        if (signals.wait_beyond(seen, std::chrono::milliseconds(20)) > seen) {
            MOESERVE_LOG_W(logger, "api", "second signal: not waiting for the running requests");
            break;
        }
    }
    if (engines.num_in_flight() > 0) {
        MOESERVE_LOG_W(logger, "api", "aborting %d requests still running", engines.num_in_flight());
        engines.abort_all();
    }
    // The aborted requests' answers (and any other still being sent), bounded: a client that does
    // not read must not hold the exit.
    for (int i = 0; i < 100 && unfinished(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// --api-server-count: what runs with it, else one sentence saying why not.
void check_api_server_count(const ServeOptions& o, const Deployment& d, const engine::KvTransferConfig& kv_transfer) {
    const int n = o.vllm.api_server_count;
    if (n < 1 || n > kMaxApiServers) {
        raise(ErrorCode::kInvalidArgument,
              "--api-server-count must be in [1, {}]; got {} (a node without an API server is --headless)",
              kMaxApiServers, n);
    }
    if (n == 1) return;
    if (o.parallel.headless) {
        raise(ErrorCode::kInvalidArgument,
              "--api-server-count {} cannot be used with --headless (a headless node runs no API server)", n);
    }
    if (!d.local_sockets()) {
        raise(ErrorCode::kInvalidArgument,
              "--api-server-count {}: several API servers need every engine they reach on this node (all DP ranks "
              "here, or one DP rank per instance with --data-parallel-rank); engines on other nodes reach one API "
              "server only",
              n);
    }
    if (kv_transfer.role != engine::KvTransferConfig::Role::kNone) {
        raise(ErrorCode::kInvalidArgument,
              "--api-server-count {} with --kv-transfer-config is not supported: run one API server per PD "
              "instance (moeserve proxy spreads the requests)",
              n);
    }
}

// The deployment `serve` runs, from the flags and the model's config.json, with what the flags
// must agree on checked first (a startup error, before anything starts).
Deployment serve_deployment(const ServeOptions& o, const nlohmann::json& config,
                            const engine::KvTransferConfig& kv_transfer) {
    // env: GLOO_SOCKET_IFNAME, the network interface the ranks' Gloo transport binds.
    const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
    Deployment d = make_deployment(o.parallel, config, iface ? iface : "");
    if (o.engine.enable_eplb && d.sizes.ep < 2) {
        raise(ErrorCode::kInvalidArgument,
              "--enable-eplb balances experts between expert-parallel ranks: add --enable-expert-parallel with "
              "--data-parallel-size or --tensor-parallel-size > 1");
    }
    if (kv_transfer.role != engine::KvTransferConfig::Role::kNone) {
        const char* env_key = std::getenv(ipc::kRankPlaneKeyEnv);
        if (o.rank_plane_key_file.empty() && !(env_key && *env_key)) {
            raise(ErrorCode::kInvalidArgument,
                  "--kv-transfer-config: the prefill and decode instances authenticate the KV transfer with one "
                  "shared rank-plane key: set {} to the same 32+ random characters on every instance, or pass "
                  "--rank-plane-key-file",
                  ipc::kRankPlaneKeyEnv);
        }
    }
    d.heartbeat_timeout_ms = o.heartbeat_timeout_ms;
    check_api_server_count(o, d, kv_transfer);
    d.api_servers = o.vllm.api_server_count;
    return d;
}

// The HTTP side's CORS answers (--allowed-origins/-methods/-headers, --allow-credentials).
serve::CorsOptions cors_options(const ServeOptions& o) {
    serve::CorsOptions cors;
    cors.allow_credentials = o.allow_credentials;
    if (!o.allowed_origins.empty()) cors.origins = json_string_list("--allowed-origins", o.allowed_origins);
    if (!o.allowed_methods.empty()) cors.methods = json_string_list("--allowed-methods", o.allowed_methods);
    if (!o.allowed_headers.empty()) cors.headers = json_string_list("--allowed-headers", o.allowed_headers);
    return cors;
}

// The router's configuration: the flags, the model's config.json, tokenizer and generation config.
serve::RouterConfig router_config(const ServeOptions& o, const nlohmann::json& config, const tokenizer::Tokenizer& tok,
                                  const engine::KvTransferConfig& kv_transfer, const std::string& key, Logger& logger) {
    serve::RouterConfig rc;
    rc.limits.served_model_name = o.served_model_names.empty() ? o.engine.model : o.served_model_names.front();
    if (o.served_model_names.size() > 1)
        rc.limits.model_aliases.assign(o.served_model_names.begin() + 1, o.served_model_names.end());
    if (!o.chat_template.empty()) rc.chat_template = chat_template_of_flag(o.chat_template);
    rc.root_path = o.root_path;
    rc.priority_scheduling = o.engine.scheduling_policy == "priority";
    rc.kv_producer = kv_transfer.produces();
    rc.kv_consumer = kv_transfer.consumes();
    if (kv_transfer.role != engine::KvTransferConfig::Role::kNone) rc.kv_transfer_key = key;
    // The access policy's origins: only those listed (CORS answers "*" without the flag, but a
    // loopback server still refuses other sites' requests then).
    if (!o.allowed_origins.empty()) rc.access.allowed_origins = cors_options(o).origins;
    if (o.enable_auto_tool_choice) rc.tool_call_parser = o.tool_call_parser;
    serve::openai::ReasoningParser::Format reasoning{};
    if (serve::openai::reasoning_format_of(o.reasoning_parser, reasoning)) rc.reasoning_format = reasoning;
    rc.log_requests = o.enable_log_requests && !o.disable_log_requests;
    rc.access_log = !o.disable_access_log;
    rc.responses_store_size = static_cast<size_t>(o.responses_store_size);
    rc.max_log_len = o.max_log_len;
    rc.limits.max_model_len = o.engine.max_model_len;
    rc.limits.max_logprobs = o.max_logprobs;
    rc.limits.vocab_size = config_int(config, "vocab_size", tok.vocab_size(), o.engine.model);
    rc.access.api_keys = o.access.api_keys;
    rc.access.allowed_hosts = o.access.allowed_hosts;
    rc.access.forwarded_allow_ips = o.access.forwarded_allow_ips;
    rc.access.loopback_only = serve::is_loopback_host(o.host);
    rc.max_choices_per_request = o.max_choices_per_request;
    rc.num_workers = o.api_workers;
    rc.model_path = o.engine.model;
    rc.version = MOESERVE_VERSION;
    const GenerationConfig gen =
        read_generation_config(o.vllm.generation_config, o.engine.model, o.vllm.override_generation_config);
    rc.generation_defaults = gen.defaults;
    rc.eos_token_ids = model_eos_token_ids(config, o.engine.model, tok.eos_token_id(), gen);
    if (!gen.source.empty())
        MOESERVE_LOG_I(logger, "api", "sampling defaults and EOS ids from %s (--generation-config)",
                       gen.source.c_str());
    return rc;
}

// How this API server reaches its engines: every DP rank, or (external load balancing) its own.
serve::EngineClientOptions engine_client_options(const ServeOptions& o, const Deployment& d,
                                                 const std::string& ipc_path, int server_index,
                                                 const std::string& key) {
    const int first_engine = d.external_lb ? d.start : 0;
    const int num_engines = d.external_lb ? d.local : d.sizes.dp;
    serve::EngineClientOptions eco{
        .output_address = d.local_sockets() ? d.output_address(ipc_path, server_index) : d.bind_address(),
        .input_addresses = {},
        .heartbeat_timeout_ms = o.heartbeat_timeout_ms,
        .step_watchdog_ms =
            o.step_watchdog_timeout < 0 ? o.heartbeat_timeout_ms / 2 : static_cast<int>(o.step_watchdog_timeout * 1000),
        .queue_timeout_ms = static_cast<int>(o.request_queue_timeout * 1000),
        .rank_plane_key = key,
        .first_engine_index = first_engine,
        .client_index = server_index,
        .engines_recover_together = d.self_healing() && parallel::dp_groups_step_together(d.sizes)};
    for (int i = first_engine; i < first_engine + num_engines; ++i)
        eco.input_addresses.push_back(d.local_sockets() ? d.input_address(ipc_path, i, server_index)
                                                        : d.bind_address());
    return eco;
}

// Waits for every engine this server reaches (local and remote), but not for ranks that died
// (raises), nor past --engine-ready-timeout (raises), nor past a signal (returns false).
bool wait_for_engines(const ServeOptions& o, serve::EngineClient& engines, RankProcesses& ranks, SignalWatcher& signals,
                      const std::function<bool()>& engine_lost, std::chrono::steady_clock::time_point started,
                      Logger& logger) {
    const auto deadline = started + std::chrono::duration<double>(o.engine_ready_timeout);
    while (!engines.wait_ready(200)) {
        if (engine_lost()) raise(ErrorCode::kUnavailable, "a rank process exited during startup");
        if (signals.count() > 0) {
            MOESERVE_LOG_I(logger, "api", "signal %d before the engines were ready: stopping", signals.last());
            return false;
        }
        for (const auto& r : ranks.snapshot()) {
            if (r.exited)
                raise(ErrorCode::kUnavailable, "rank {} {} during startup (see its messages above)", r.rank,
                      describe_status(r.status));
        }
        if (!engines.healthy() && std::chrono::steady_clock::now() > deadline) {
            raise(ErrorCode::kUnavailable, "the engines were not ready within --engine-ready-timeout {} s",
                  o.engine_ready_timeout);
        }
    }
    return true;
}

// One of several API servers: its share of /metrics, written every half second for the others.
void write_metrics_snapshots(serve::Metrics& metrics, const serve::EngineClient& engines,
                             const std::atomic<bool>& stopping) {
    while (!stopping) {
        metrics.write_snapshot(engines.num_in_flight());
        for (int i = 0; i < 5 && !stopping; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

// The first request to try, for a person at the terminal.
void print_try_line(const ServeOptions& o, int port, const std::string& model) {
    std::fprintf(stderr,
                 "try: curl http://%s:%d/v1/completions -H 'Content-Type: application/json'%s -d '{\"model\": \"%s\", "
                 "\"prompt\": \"Hello\", \"max_tokens\": 16}'\n",
                 o.host.c_str(), port, o.access.api_keys.empty() ? "" : " -H 'Authorization: Bearer $MOESERVE_API_KEY'",
                 model.c_str());
}

// Tells the ranks on other nodes where this server's engine sockets are (the store's keys).
void publish_engine_addresses(const Deployment& d, int store_port, const serve::EngineClient& engines) {
    parallel::TcpStore publish(d.address, store_port, std::chrono::milliseconds(d.timeout_ms));
    const auto set = [&](const std::string& k, const std::string& v) {
        publish.set(k, std::vector<char>(v.begin(), v.end()));
    };
    set(store_key_output_address(), engines.output_endpoint());
    for (int i = 0; i < d.sizes.dp; ++i) set(store_key_input_address(i), engines.input_endpoint(i));
}

// vLLM's vllm:cache_config_info labels.
serve::CacheConfigInfo metrics_cache_config(const EngineOptions& e) {
    return {{"block_size", std::to_string(e.block_size)},
            {"cache_dtype", e.kv_cache_dtype},
            {"enable_prefix_caching", e.enable_prefix_caching ? "True" : "False"},
            {"gpu_memory_utilization", fmt::format("{}", e.gpu_memory_utilization)}};
}

// One of several API servers: /metrics adds the other servers' request and HTTP counts.
void share_metrics(serve::Metrics& metrics, const ServeOptions& o, const Deployment& d, const std::string& ipc_path,
                   int server_index) {
    std::vector<std::string> others;
    for (int i = 0; i < d.api_servers; ++i)
        if (i != server_index) others.push_back(api_server_metrics_file(ipc_path, i));
    metrics.share(server_index, api_server_metrics_file(ipc_path, server_index), others, o.api_server_restarts);
}

// The HTTP server, bound now (a busy port or a bad --host fails at once, before any rank starts);
// it hands requests to *router once that exists (it serves only from run()).
std::unique_ptr<serve::HttpServer> bind_http_server(const ServeOptions& o, serve::Router*& router, Logger& logger) {
    const bool one_of_several = o.api_server_index >= 0;
    return std::make_unique<serve::HttpServer>(
        serve::HttpServerOptions{
            .host = o.host,
            .port = one_of_several ? o.api_server_port : o.port,
            .num_threads = o.http_threads,
            .max_body_bytes = static_cast<size_t>(o.max_request_body_bytes),
            .max_connections = o.max_connections,
            .logger = &logger,
            .cors = cors_options(o),
            .tls = o.tls,
            .reuse_port = one_of_several,
            .header_check = [&router](const serve::HttpRequest& head) { return router->check_head(head); }},
        [&router](serve::HttpRequest r, std::shared_ptr<serve::Responder> s) {
            router->handle(std::move(r), std::move(s));
        });
}

void log_listening(const ServeOptions& o, const serve::HttpServer& server, const serve::RouterConfig& rc,
                   Logger& logger) {
    MOESERVE_LOG_I(logger, "api", "listening on %s://%s:%d (max %d connections; %s%s); waiting for the engines",
                   o.tls.cert_file.empty() ? "http" : "https", o.host.c_str(), server.port(), server.max_connections(),
                   serve::AccessPolicy(rc.access).describe().c_str(),
                   o.root_path.empty() ? "" : fmt::format("; --root-path {}", o.root_path).c_str());
}

void raise_open_file_limit() {
    rlimit files{};  // one descriptor per connection: allow as many as the hard limit does
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
}

// One API server: a lone one that starts its deployment's local ranks, or (--api-server-count)
// one of several, whose parent runs the ranks and the store and owns the run folder, serving on
// the port its parent reserved, with its own sockets.
int run_api_server(const ServeOptions& o, const Deployment& d, const nlohmann::json& config,
                   const engine::KvTransferConfig& kv_transfer) {
    const int server_index = std::max(0, o.api_server_index);
    const bool one_of_several = o.api_server_index >= 0;
    Logger logger(one_of_several ? fmt::format("api{}", server_index) : "api", parse_log_level(o.engine.log_level));
    for (const auto& note : o.vllm.no_effect)
        MOESERVE_LOG_I(logger, "api", "flag with no effect here: %s", note.c_str());
    const auto tok = load_model_tokenizer(o.engine.tokenizer_dir());
    const std::string key = rank_plane_key(o, d);
    const serve::RouterConfig rc = router_config(o, config, tok, kv_transfer, key, logger);

    // First: blocks the signals before any thread starts. One of several API servers is stopped by
    // its parent with SIGUSR1 (it ignores SIGINT/SIGTERM, as the ranks do).
    SignalWatcher signals(one_of_several ? std::vector<int>{SIGUSR1} : std::vector<int>{SIGTERM, SIGINT});
    raise_open_file_limit();
    // The HTTP server is bound first (a busy port or a bad --host fails at once, before any rank
    // starts) and destroyed last: the router's requests hold its connections until they end.
    // It serves only once the router exists (run() below).
    serve::Router* router_ptr = nullptr;
    const std::unique_ptr<serve::HttpServer> http_server = bind_http_server(o, router_ptr, logger);
    serve::HttpServer& server = *http_server;
    std::optional<IpcDir> ipc_dir;
    if (d.local_sockets() && !one_of_several) ipc_dir.emplace();
    const std::string ipc_path = one_of_several ? o.api_server_run_dir : ipc_dir ? ipc_dir->path() : "";
    const std::unique_ptr<parallel::TcpStoreServer> store =
        one_of_several ? nullptr : start_rendezvous_store(d, logger);
    const int store_port = store ? store->port() : d.rpc_port;
    const serve::EngineClientOptions eco = engine_client_options(o, d, ipc_path, server_index, key);
    serve::EngineClient engines(eco, logger);
    if (o.api_server_restarts > 0) engines.announce_restart();  // before any request: the old ones go
    if (!d.local_sockets()) publish_engine_addresses(d, store_port, engines);
    serve::Metrics metrics(rc.limits.served_model_name, rc.limits.max_model_len, metrics_cache_config(o.engine));
    if (one_of_several) share_metrics(metrics, o, d, ipc_path, server_index);
    serve::Router router(rc, tok, engines, metrics, logger);  // a malformed chat template fails here
    router_ptr = &router;
    const auto started = std::chrono::steady_clock::now();
    RankProcesses ranks(environment_with(ipc::kRankPlaneKeyEnv, key));
    // A rank that exits while we serve: restarted, or its engines lost (rank_supervisor.h).
    // Several API servers learn of it from their parent's event log.
    const int num_engines = static_cast<int>(eco.input_addresses.size());
    ServerEngineNotices notices(engines, num_engines, metrics);
    RankSupervisor supervisor(d, eco.first_engine_index, num_engines, ranks, notices, logger);
    std::optional<EngineEventLogReader> events;
    if (one_of_several) events.emplace(engine_event_log(ipc_path));
    if (events && o.api_server_restarts > 0) events->skip_past(notices);
    std::atomic<bool> stopping{false};
    std::thread watcher, http, snapshots;
    ScopeExit cleanup([&] {  // however this ends: nothing left running, nothing left behind
        stopping = true;
        if (snapshots.joinable()) snapshots.join();
        server.stop();
        if (http.joinable()) http.join();
        engines.shutdown();
        ranks.wait_or_kill(ranks.all_exited() ? 0 : 5);
        if (watcher.joinable()) watcher.join();
    });
    if (!one_of_several) spawn_local_ranks(ranks, o.engine, d, store_port, ipc_path, logger);
    // One of several API servers learns of its engines' fate from its parent (no waitpid here):
    // true once an engine was lost.
    const auto replay_events = [&] { return events && events->replay(notices) > 0; };
    watcher = std::thread([&] {
        ranks.watch([&](const RankProcesses::Rank& r) {
            if (!stopping) supervisor.on_exit(r);
        });
    });
    signals.start();
    // Serving from now on: /health says 503 and generation requests get 503 until the engines are up.
    // One of several API servers serves only once its engines are: until then its connections
    // wait in the listen backlog, so a client never meets a server that is not ready while
    // another one is (the kernel picks the server per connection).
    if (!one_of_several) http = std::thread([&server] { server.run(); });
    log_listening(o, server, rc, logger);
    if (!wait_for_engines(o, engines, ranks, signals, replay_events, started, logger)) return 0;
    supervisor.serving();
    MOESERVE_LOG_I(logger, "api", "%d engine(s) ready in %.2f s", num_engines,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    MOESERVE_LOG_I(logger, "api", "serving %s on %s://%s:%d", rc.limits.served_model_name.c_str(),
                   o.tls.cert_file.empty() ? "http" : "https", o.host.c_str(), server.port());
    if (one_of_several) {
        http = std::thread([&server] { server.run(); });
        snapshots = std::thread([&] { write_metrics_snapshots(metrics, engines, stopping); });
        write_text_file(api_server_ready_file(ipc_path, server_index), "ready\n");
    } else {
        print_try_line(o, server.port(), rc.limits.served_model_name);
    }

    PeriodicStats stats(o, server_index, logger);
    while (signals.wait_beyond(0, std::chrono::milliseconds(one_of_several ? 200 : 1000)) == 0) {
        replay_events();
        stats.log_if_due(engines.stats());
        supervisor.check_health();
    }
    drain(o, router, engines, server, signals, logger);
    stopping = true;
    if (snapshots.joinable()) snapshots.join();
    if (one_of_several) metrics.write_snapshot(engines.num_in_flight());
    engines.shutdown();
    ranks.wait_or_kill(10);
    MOESERVE_LOG_I(logger, "api", "stopped");
    return 0;
}

int run_serve(ServeOptions o, const nlohmann::json& config) {
    o.engine.max_model_len = resolve_max_model_len(o.engine, config);
    const engine::KvTransferConfig kv_transfer = parse_kv_transfer_config(o.engine.kv_transfer_config);
    const Deployment d = serve_deployment(o, config, kv_transfer);
    if (o.parallel.headless) return run_headless(o, d);
    if (d.api_servers > 1 && o.api_server_index < 0) return run_api_servers(o, d);
    if (o.api_server_restarts > 0 && std::getenv("MOESERVE_DEBUG_EXIT_ON_REJOIN") != nullptr) {  // test: a crash loop
        std::fprintf(stderr, "API server %d: exiting at once on a restart (MOESERVE_DEBUG_EXIT_ON_REJOIN)\n",
                     o.api_server_index);
        return 3;
    }
    return run_api_server(o, d, config, kv_transfer);
}

// The API's flags: model names, chat template, logprobs, tools and reasoning, request logs.
void add_serve_api_flags(CLI::App* sub, ServeOptions& o) {
    sub->add_option("--served-model-name", o.served_model_names,
                    "model names in the API, the first reported (default: the model path)")
        ->expected(1, -1);
    sub->add_option("--chat-template", o.chat_template,
                    "a chat template file, or the template itself (default: the tokenizer's)");
    sub->add_option("--root-path", o.root_path, "a path prefix a proxy may leave on request paths (stripped)");
    sub->add_option("--max-logprobs", o.max_logprobs,
                    "logprobs / top_logprobs / prompt_logprobs a request may ask for at most")
        ->capture_default_str();
    sub->add_flag("--enable-auto-tool-choice", o.enable_auto_tool_choice,
                  "tool_choice auto: parse the model's tool calls (needs --tool-call-parser)");
    sub->add_option(
        "--tool-call-parser", o.tool_call_parser,
        fmt::format("how the model writes tool calls: {}", fmt::join(serve::openai::tool_parser_names(), " | ")));
    sub->add_option("--reasoning-parser", o.reasoning_parser,
                    fmt::format("split the reasoning (<think>, harmony analysis) into reasoning_content: {}",
                                fmt::join(serve::openai::reasoning_parser_names(), " | ")));
    sub->add_flag("--enable-log-requests", o.enable_log_requests,
                  "log each request as it arrives (id, prompt, sampling params) and as it finishes");
    sub->add_flag("--disable-log-requests", o.disable_log_requests,
                  "no request lines (the default; vLLM's older flag, wins over --enable-log-requests)");
    sub->add_flag("--disable-log-stats", o.disable_log_stats,
                  "no periodic stats line (throughput, running/waiting, KV cache usage, prefix-cache hit rate; every "
                  "VLLM_LOG_STATS_INTERVAL s, default 10)");
    sub->add_flag("--disable-uvicorn-access-log", o.disable_access_log,
                  "no access line per request (client, method, target, status, latency, tokens)");
    sub->add_option("--responses-store-size", o.responses_store_size,
                    "POST /v1/responses: responses kept in memory for previous_response_id and GET "
                    "/v1/responses/{id}, the oldest evicted first (0 = none)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    sub->add_option("--max-log-len", o.max_log_len,
                    "with --enable-log-requests: at most N characters and N token ids of each prompt (default: all)")
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--max-choices-per-request", o.max_choices_per_request,
                    "prompts x n of one request at most (more is a 400)")
        ->capture_default_str();
    sub->add_option("--request-queue-timeout", o.request_queue_timeout,
                    "seconds a request may wait without any output before it fails with 503 (0 = no limit)")
        ->capture_default_str();
    sub->add_option("--api-workers", o.api_workers,
                    "threads that parse, render chat templates and tokenize (off the I/O threads)")
        ->capture_default_str();
}

// The HTTP server's flags: address, TLS, CORS, access, connections, threads, timeouts.
void add_serve_http_flags(CLI::App* sub, ServeOptions& o) {
    sub->add_option("--allowed-origins", o.allowed_origins,
                    "CORS: a JSON list of origins whose pages may call the server (default [\"*\"] for the CORS "
                    "headers; on a loopback --host other sites' requests are still refused unless listed here)");
    sub->add_option("--allowed-methods", o.allowed_methods, "CORS: a JSON list of methods (default [\"*\"])");
    sub->add_option("--allowed-headers", o.allowed_headers, "CORS: a JSON list of request headers (default [\"*\"])");
    sub->add_flag("--allow-credentials", o.allow_credentials, "CORS: allow credentials (cookies, Authorization)");
    sub->add_option("--ssl-certfile", o.tls.cert_file, "HTTPS: the server's certificate chain (PEM)");
    sub->add_option("--ssl-keyfile", o.tls.key_file, "HTTPS: its private key (PEM, unencrypted)");
    sub->add_option("--ssl-ca-certs", o.tls.ca_file,
                    "HTTPS: CA certificates that client certificates are checked against");
    sub->add_option("--ssl-cert-reqs", o.tls.cert_reqs, "HTTPS client certificates: 0 none, 1 optional, 2 required")
        ->check(CLI::Range(0, 2))
        ->capture_default_str();
    sub->add_option("--host", o.host)->capture_default_str();
    sub->add_option("--port", o.port, "0 = any free port")->capture_default_str();
    add_access_flags(sub, o.access);
    sub->add_option("--max-connections", o.max_connections,
                    "open HTTP connections at most; more get 503 (0 = the open-file limit less 256)")
        ->capture_default_str();
    sub->add_option("--http-threads", o.http_threads, "I/O threads of the API server")->capture_default_str();
    sub->add_option("--max-request-body-bytes", o.max_request_body_bytes, "larger bodies get 413")
        ->capture_default_str();
    sub->add_option("--drain-timeout", o.drain_timeout, "seconds SIGTERM waits for running requests")
        ->capture_default_str();
    sub->add_option("--engine-ready-timeout", o.engine_ready_timeout, "seconds to wait for the model to load")
        ->capture_default_str();
    sub->add_option("--heartbeat-timeout-ms", o.heartbeat_timeout_ms, "an engine silent this long is declared dead")
        ->capture_default_str();
    sub->add_option("--step-watchdog-timeout", o.step_watchdog_timeout,
                    "seconds an engine with requests in flight may go without completing a step before /health "
                    "reports unhealthy, its requests kept (0 = off; default: half of --heartbeat-timeout-ms, so it "
                    "warns before the heartbeat declares the engine dead)");
}

// The deployment's flags: DP / TP / EP sizes, nodes, rendezvous, self-healing, the rank plane key.
void add_serve_parallel_flags(CLI::App* sub, ServeOptions& o) {
    ParallelFlags& p = o.parallel;
    sub->add_option("--data-parallel-size", p.data_parallel_size, "DP groups (engine cores) in the deployment")
        ->capture_default_str();
    sub->add_option("--tensor-parallel-size", p.tensor_parallel_size,
                    "ranks per DP group (heads, MLP, vocabulary split)")
        ->capture_default_str();
    sub->add_option("--data-parallel-size-local", p.data_parallel_size_local,
                    "DP groups on this node (default: all from the start rank)");
    sub->add_option("--data-parallel-start-rank", p.data_parallel_start_rank, "first DP rank on this node")
        ->capture_default_str();
    sub->add_option("--data-parallel-rank", p.data_parallel_rank,
                    "external load balancing (vLLM's -dpn): this instance is DP rank N with its own API server; start "
                    "one per DP rank with the same --data-parallel-size, -address and -rpc-port");
    sub->add_option("--data-parallel-address", p.data_parallel_address,
                    "the head's address, reachable from every node (default 127.0.0.1)");
    sub->add_option("--data-parallel-rpc-port", p.data_parallel_rpc_port,
                    "the head's rendezvous port (0: any, single node); the engine sockets get ports the kernel picks")
        ->capture_default_str();
    sub->add_flag("--enable-expert-parallel", p.enable_expert_parallel,
                  "split the routed experts over all dp*tp ranks (ep = dp*tp)");
    sub->add_flag("--headless", p.headless, "run only this node's ranks (no API server); they connect to the head");
    sub->add_option("--distributed-timeout-ms", p.distributed_timeout_ms,
                    "bound on rendezvous and every collective; a dead peer fails its ranks after this")
        ->capture_default_str();
    sub->add_option("--max-rank-restarts", p.max_rank_restarts,
                    "times in a row a dead rank is restarted and its group re-formed before the group is given up, "
                    "and a dead API server of --api-server-count restarted (0: a dead rank stops its group, a dead "
                    "API server the deployment; docs/parallelism.md)")
        ->capture_default_str();
    sub->add_flag("--disable-collective-guard", p.disable_collective_guard,
                  "leave out the per-collective step check that fails a desynchronized group at once "
                  "(docs/parallelism.md)");
    sub->add_option("--rank-plane-key-file", o.rank_plane_key_file,
                    "file with the key that authenticates the engine sockets "
                    "(else env MOESERVE_RANK_PLANE_KEY; a single node makes its own)");
    sub->add_flag("--trust-remote-code", o.trust_remote_code, "accepted for vllm compatibility; no effect");
    // Hidden: what the parent of --api-server-count > 1 tells each API server process it starts.
    sub->add_option("--api-server-index", o.api_server_index)->group("");
    sub->add_option("--api-server-run-dir", o.api_server_run_dir)->group("");
    sub->add_option("--api-server-port", o.api_server_port)->group("");
    sub->add_option("--api-server-restarts", o.api_server_restarts)->group("");
}

// Checks the flags CLI11 cannot check alone (names of parsers, a flag that needs another).
void check_serve_flags(const ServeOptions& o) {
    const auto known = [](const std::vector<std::string>& names, const std::string& name) {
        return std::find(names.begin(), names.end(), name) != names.end();
    };
    if (!o.tool_call_parser.empty() && !known(serve::openai::tool_parser_names(), o.tool_call_parser)) {
        throw CLI::ValidationError("--tool-call-parser",
                                   fmt::format("'{}' is not one of: {}", o.tool_call_parser,
                                               fmt::join(serve::openai::tool_parser_names(), ", ")));
    }
    if (o.enable_auto_tool_choice && o.tool_call_parser.empty()) {
        throw CLI::ValidationError("--enable-auto-tool-choice", "needs --tool-call-parser");
    }
    if (!o.reasoning_parser.empty() && !known(serve::openai::reasoning_parser_names(), o.reasoning_parser)) {
        throw CLI::ValidationError("--reasoning-parser",
                                   fmt::format("'{}' is not one of: {}", o.reasoning_parser,
                                               fmt::join(serve::openai::reasoning_parser_names(), ", ")));
    }
}

}  // namespace

void add_serve_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* sub = app.add_subcommand("serve", "Serve a model over the OpenAI HTTP API");
    o->engine = engine_defaults(EngineCommand::kServe);
    add_engine_flags(sub, o->engine, EngineCommand::kServe);
    add_vllm_flags(sub, o->vllm);
    add_serve_api_flags(sub, *o);
    add_serve_http_flags(sub, *o);
    add_serve_parallel_flags(sub, *o);
    sub->callback([o, action] {
        resolve_api_keys(o->access.api_keys);
        if (o->engine.model.empty()) throw CLI::RequiredError("the model directory (`serve DIR` or --model DIR)");
        // env: OMNI_PD_HYBRID=1 turns PD hybrid scheduling on, as --pd-hybrid does.
        if (const char* hybrid = std::getenv("OMNI_PD_HYBRID"); hybrid && std::string(hybrid) == "1")
            o->engine.pd_hybrid = true;
        check_serve_flags(*o);
        *action = [o] {
            o->log_stats_interval = serve::StatsLog::interval_from_env();
            check_vllm_flags(o->vllm);
            // the model and the flag ranges, before anything binds
            const model::ModelSource source = check_engine_options(o->engine).source;
            // Bad values fail here, not in the ranks.
            model::parse_kv_cache_dtype(o->engine.kv_cache_dtype, DType::kBF16);
            if (!o->engine.kv_cache_memory.empty()) parse_bytes(o->engine.kv_cache_memory);
            parse_kv_transfer_config(o->engine.kv_transfer_config);
            model::parse_dtype_is_f32(o->engine.dtype);
            return run_serve(*o, source.config.json());
        };
    });
    add_rank_command(app, action);
}

}  // namespace moeserve::cli
