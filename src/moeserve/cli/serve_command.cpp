// `moeserve serve`: the API server process plus its rank processes (DESIGN.md, Processes), with
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

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "moeserve/cli/commands.h"
#include "moeserve/cli/serve_layout.h"
#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/parallel/rendezvous.h"
#include "moeserve/serve/engine_client.h"
#include "moeserve/serve/http_server.h"
#include "moeserve/serve/metrics.h"
#include "moeserve/serve/routes.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {

namespace {

struct ServeOptions {
    EngineOptions engine;
    ParallelFlags parallel;
    std::string served_model_name;
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string api_key;
    bool trust_remote_code = false;
    int http_threads = 1;
    int64_t max_request_body_bytes = 16 << 20;
    double drain_timeout = 30;
    double engine_ready_timeout = 600;
    int heartbeat_timeout_ms = 30000;
    double step_watchdog_timeout = 120;  // seconds; 0 = off
};

// fork + exec of this binary as a rank; the child dies with us (PR_SET_PDEATHSIG).
pid_t spawn_rank(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) raise(ErrorCode::kIo, "fork of the rank process failed: {}", std::strerror(errno));
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        execv("/proc/self/exe", argv.data());
        _exit(127);
    }
    return pid;
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
    return "stopped";
}

// The rank processes this node started, and which of them have exited (reaped by watch()).
class RankProcesses {
public:
    struct Rank {
        pid_t pid = 0;
        int rank = 0;
        bool exited = false;
        int status = 0;
    };

    void spawn(const std::vector<std::string>& argv, int rank) {
        std::lock_guard lock(mutex_);
        ranks_.push_back({spawn_rank(argv), rank});
    }
    std::vector<Rank> snapshot() const {
        std::lock_guard lock(mutex_);
        return ranks_;
    }
    // Reaps children until all have exited; on_exit(rank) for each (watcher thread).
    template <typename F>
    void watch(F&& on_exit) {
        while (true) {
            int status = 0;
            const pid_t pid = waitpid(-1, &status, 0);
            if (pid < 0) return;  // no children left
            Rank exited;
            {
                std::lock_guard lock(mutex_);
                for (auto& r : ranks_) {
                    if (r.pid == pid) {
                        r.exited = true;
                        r.status = status;
                        exited = r;
                    }
                }
            }
            if (exited.pid != 0) on_exit(exited);
        }
    }
    bool all_exited() const {
        std::lock_guard lock(mutex_);
        for (const auto& r : ranks_) if (!r.exited) return false;
        return true;
    }
    void signal_all(int sig) const {
        std::lock_guard lock(mutex_);
        for (const auto& r : ranks_) if (!r.exited) kill(r.pid, sig);
    }
    // Waits up to timeout_s for every rank to exit (someone runs watch()), then SIGKILLs the rest.
    void wait_or_kill(double timeout_s) const {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        while (!all_exited() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        signal_all(SIGKILL);
    }

private:
    mutable std::mutex mutex_;
    std::vector<Rank> ranks_;
};


// Compute threads per rank: --threads, else the host's cores divided between its ranks.
int threads_per_rank(const EngineOptions& e, int local_ranks) {
    if (e.threads > 0) return e.threads;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, cores / std::max(1, local_ranks));
}

// Starts this node's ranks: DP ranks [start, start + local) x every tp_rank.
void spawn_local_ranks(RankProcesses& ranks, const EngineOptions& e, const Deployment& d, int store_port,
                       const std::string& ipc_dir, Logger& logger) {
    const int threads = threads_per_rank(e, d.local * d.sizes.tp);
    for (int dp_rank = d.start; dp_rank < d.start + d.local; ++dp_rank) {
        for (int tp_rank = 0; tp_rank < d.sizes.tp; ++tp_rank) {
            const int rank = dp_rank * d.sizes.tp + tp_rank;
            ranks.spawn(rank_argv(e, d, rank, store_port, ipc_dir, threads), rank);
        }
    }
    MOESERVE_LOG_I(logger, "api", "started %d rank processes (DP ranks %d..%d, tp %d, ep %d, %d threads each); loading %s",
                   d.local * d.sizes.tp, d.start, d.start + d.local - 1, d.sizes.tp, d.sizes.ep, threads, e.model.c_str());
}

void block_signals(sigset_t& signals) {
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);
}

// ---- a --headless node: only ranks ----

int run_headless(const ServeOptions& o, const Deployment& d) {
    Logger logger(fmt::format("node dp{}..{}", d.start, d.start + d.local - 1), parse_log_level(o.engine.log_level));
    sigset_t signals;
    block_signals(signals);
    sigaddset(&signals, SIGUSR1);  // the watcher wakes the signal thread with it
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    RankProcesses ranks;
    spawn_local_ranks(ranks, o.engine, d, d.rpc_port, "", logger);
    std::atomic<int> failures{0};
    std::thread signal_thread([&] {
        int sig = 0;
        sigwait(&signals, &sig);
        if (sig == SIGUSR1) return;  // our own wake-up: the ranks are gone
        MOESERVE_LOG_I(logger, "api", "signal %d: stopping the ranks", sig);
        ranks.signal_all(SIGTERM);
    });
    // The node lives as long as its ranks: the first one that fails takes the others down (the
    // deployment steps in lock-step; a partial node is of no use to the head).
    ranks.watch([&](const RankProcesses::Rank& r) {
        const bool ok = WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
        if (!ok) {
            MOESERVE_LOG_E(logger, "api", "rank %d (process %d) %s; stopping this node's ranks", r.rank, r.pid,
                           describe_status(r.status).c_str());
            if (failures++ == 0) ranks.signal_all(SIGTERM);
        }
    });
    pthread_kill(signal_thread.native_handle(), SIGUSR1);
    signal_thread.join();
    MOESERVE_LOG_I(logger, "api", "all ranks exited");
    return failures > 0 ? 1 : 0;
}

// ---- the API server ----

int run_serve(ServeOptions o) {
    if (o.port < 0 || o.port > 65535) raise(ErrorCode::kInvalidArgument, "--port must be in [0, 65535]; got {}", o.port);
    const auto config = read_model_config(o.engine.model);
    o.engine.max_model_len = resolve_max_model_len(o.engine, config);
    // env: GLOO_SOCKET_IFNAME, the network interface the ranks' Gloo transport binds.
    const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
    const Deployment d = make_deployment(o.parallel, config, iface ? iface : "");
    if (o.parallel.headless) return run_headless(o, d);

    Logger logger("api", parse_log_level(o.engine.log_level));
    const auto tok = tokenizer::Tokenizer::from_dir(o.engine.model);

    serve::RouterConfig rc;
    rc.limits.served_model_name = o.served_model_name.empty() ? o.engine.model : o.served_model_name;
    rc.limits.max_model_len = o.engine.max_model_len;
    rc.limits.vocab_size = static_cast<int32_t>(config.value("vocab_size", int64_t{tok.vocab_size()}));
    rc.api_key = o.api_key;
    rc.model_path = o.engine.model;
    rc.version = MOESERVE_VERSION;
    if (const auto eos = config.find("eos_token_id"); eos != config.end()) {
        if (eos->is_number_integer()) rc.eos_token_ids.push_back(eos->get<int32_t>());
        if (eos->is_array()) for (const auto& e : *eos) if (e.is_number_integer()) rc.eos_token_ids.push_back(e.get<int32_t>());
    }
    if (tok.eos_token_id()) rc.eos_token_ids.push_back(*tok.eos_token_id());

    // Signals go to the signal thread only (blocked everywhere else, before threads start).
    sigset_t signals;
    block_signals(signals);
    rlimit files{};  // one descriptor per connection: allow as many as the hard limit does
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }

    const auto ipc_path = std::filesystem::temp_directory_path() / fmt::format("moeserve-{}", getpid());
    std::filesystem::create_directories(ipc_path);
    const std::string ipc_dir = ipc_path.string();
    // The rendezvous store of the ranks' Gloo world (more than one rank only).
    std::unique_ptr<parallel::TcpStoreServer> store;
    int store_port = d.rpc_port;
    if (d.world() > 1) {
        store = parallel::TcpStoreServer::start(d.address, d.rpc_port);
        store_port = store->port();
        MOESERVE_LOG_I(logger, "api", "rendezvous store on %s:%d for %d ranks (dp %d, tp %d, ep %d)", d.address.c_str(),
                       store_port, d.world(), d.sizes.dp, d.sizes.tp, d.sizes.ep);
    }
    serve::EngineClientOptions eco{d.output_address(ipc_dir), {}, o.heartbeat_timeout_ms,
                                   static_cast<int>(o.step_watchdog_timeout * 1000)};
    for (int i = 0; i < d.sizes.dp; ++i) eco.input_addresses.push_back(d.input_address(ipc_dir, i));
    serve::EngineClient engines(eco, logger);
    const auto started = std::chrono::steady_clock::now();
    RankProcesses ranks;
    spawn_local_ranks(ranks, o.engine, d, store_port, ipc_dir, logger);

    std::atomic<bool> stopping{false};
    // A rank that exits while we serve fails every engine's requests: the DP groups step in
    // lock-step, so one missing rank stops them all (the others' collectives time out and exit).
    std::thread watcher([&] {
        ranks.watch([&](const RankProcesses::Rank& r) {
            if (stopping) return;
            const std::string reason = fmt::format("rank process {} (rank {}) {}", r.pid, r.rank, describe_status(r.status));
            MOESERVE_LOG_E(logger, "api", "%s", reason.c_str());
            for (int i = 0; i < d.sizes.dp; ++i) engines.mark_dead(i, reason);
        });
    });
    const auto cleanup = [&] {
        stopping = true;
        ranks.signal_all(SIGTERM);
        ranks.wait_or_kill(5);
        watcher.join();
        std::filesystem::remove_all(ipc_path);
    };

    // Wait for every DP engine (local and remote), but not for ranks that died.
    const auto deadline = started + std::chrono::duration<double>(o.engine_ready_timeout);
    while (!engines.wait_ready(200)) {
        for (const auto& r : ranks.snapshot()) {
            if (r.exited) {
                cleanup();
                raise(ErrorCode::kUnavailable, "rank {} {} during startup (see its messages above)", r.rank, describe_status(r.status));
            }
        }
        if (!engines.healthy() && std::chrono::steady_clock::now() > deadline) {
            cleanup();
            raise(ErrorCode::kUnavailable, "the engines were not ready within --engine-ready-timeout {} s", o.engine_ready_timeout);
        }
    }
    MOESERVE_LOG_I(logger, "api", "%d engine(s) ready in %.2f s", d.sizes.dp,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());

    serve::Metrics metrics(rc.limits.served_model_name);
    serve::Router router(rc, tok, engines, metrics, logger);
    serve::HttpServer server({.host = o.host, .port = o.port, .num_threads = o.http_threads,
                              .max_body_bytes = static_cast<size_t>(o.max_request_body_bytes)},
                             [&router](serve::HttpRequest r, std::shared_ptr<serve::Responder> s) { router.handle(std::move(r), std::move(s)); });
    MOESERVE_LOG_I(logger, "api", "serving %s on http://%s:%d", rc.limits.served_model_name.c_str(), o.host.c_str(), server.port());
    std::fprintf(stderr, "try: curl http://%s:%d/v1/completions -H 'Content-Type: application/json'%s -d '{\"model\": \"%s\", \"prompt\": \"Hello\", \"max_tokens\": 16}'\n",
                 o.host.c_str(), server.port(), o.api_key.empty() ? "" : " -H 'Authorization: Bearer $MOESERVE_API_KEY'",
                 rc.limits.served_model_name.c_str());

    std::thread signal_thread([&] {
        int sig = 0;
        sigwait(&signals, &sig);
        MOESERVE_LOG_I(logger, "api", "signal %d: draining (up to %.0f s)", sig, o.drain_timeout);
        router.set_draining();
        server.stop_accepting();
        const auto drain_end = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.drain_timeout);
        while (engines.num_in_flight() > 0 && std::chrono::steady_clock::now() < drain_end) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (engines.num_in_flight() > 0) {
            MOESERVE_LOG_W(logger, "api", "aborting %d requests still running", engines.num_in_flight());
            engines.abort_all();
            for (int i = 0; i < 100 && engines.num_in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the last answers go out
        stopping = true;
        engines.shutdown();
        server.stop();
    });
    server.run();
    signal_thread.join();
    ranks.wait_or_kill(10);
    cleanup();
    MOESERVE_LOG_I(logger, "api", "stopped");
    return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* sub = app.add_subcommand("serve", "Serve a model over the OpenAI HTTP API");
    add_engine_options(sub, o->engine);
    sub->add_option("--served-model-name", o->served_model_name, "model name in the API (default: --model)");
    sub->add_option("--host", o->host)->capture_default_str();
    sub->add_option("--port", o->port, "0 = any free port")->capture_default_str();
    sub->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on /v1 (env: MOESERVE_API_KEY)");
    sub->add_flag("--trust-remote-code", o->trust_remote_code, "accepted for vllm compatibility; no effect");
    auto& p = o->parallel;
    sub->add_option("--data-parallel-size", p.data_parallel_size, "DP groups (engine cores) in the deployment")->capture_default_str();
    sub->add_option("--tensor-parallel-size", p.tensor_parallel_size, "ranks per DP group (heads, MLP, vocabulary split)")->capture_default_str();
    sub->add_option("--data-parallel-size-local", p.data_parallel_size_local, "DP groups on this node (default: all from the start rank)");
    sub->add_option("--data-parallel-start-rank", p.data_parallel_start_rank, "first DP rank on this node")->capture_default_str();
    sub->add_option("--data-parallel-address", p.data_parallel_address, "the head's address, reachable from every node (default 127.0.0.1)");
    sub->add_option("--data-parallel-rpc-port", p.data_parallel_rpc_port,
                    "the head's rendezvous port; the API server's ZeroMQ sockets use the dp+1 ports after it (0: any, single node)")->capture_default_str();
    sub->add_flag("--enable-expert-parallel", p.enable_expert_parallel, "split the routed experts over all dp*tp ranks (ep = dp*tp)");
    sub->add_flag("--headless", p.headless, "run only this node's ranks (no API server); they connect to the head");
    sub->add_option("--distributed-timeout-ms", p.distributed_timeout_ms,
                    "bound on rendezvous and every collective; a dead peer fails its ranks after this")->capture_default_str();
    sub->add_option("--http-threads", o->http_threads, "I/O threads of the API server")->capture_default_str();
    sub->add_option("--max-request-body-bytes", o->max_request_body_bytes, "larger bodies get 413")->capture_default_str();
    sub->add_option("--drain-timeout", o->drain_timeout, "seconds SIGTERM waits for running requests")->capture_default_str();
    sub->add_option("--engine-ready-timeout", o->engine_ready_timeout, "seconds to wait for the model to load")->capture_default_str();
    sub->add_option("--heartbeat-timeout-ms", o->heartbeat_timeout_ms, "an engine silent this long is declared dead")->capture_default_str();
    sub->add_option("--step-watchdog-timeout", o->step_watchdog_timeout,
                    "seconds an engine with requests in flight may go without completing a step before /health "
                    "reports unhealthy (0 = off)")->capture_default_str();
    sub->callback([o, action] {
        // env: MOESERVE_API_KEY, the API key when --api-key is not given.
        if (o->api_key.empty()) {
            if (const char* key = std::getenv("MOESERVE_API_KEY")) o->api_key = key;
        }
        // env: OMNI_PD_HYBRID=1 turns PD hybrid scheduling on, as --pd-hybrid does.
        if (const char* hybrid = std::getenv("OMNI_PD_HYBRID"); hybrid && std::string(hybrid) == "1") o->engine.pd_hybrid = true;
        *action = [o] { return run_serve(*o); };
    });
    add_rank_command(app, action);
}

}  // namespace moeserve::cli
