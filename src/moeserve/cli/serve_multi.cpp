// `moeserve serve --api-server-count N` (N > 1, vLLM's flag; docs/parallelism.md, "Several API
// servers"): this process runs no HTTP server itself. It reserves the port, hosts the rendezvous
// store, starts the rank processes and N API server processes (this binary again, with the same
// flags plus hidden ones), and watches them all:
//
//   parent (this)    run folder $TMPDIR/moeserve-<pid>/: engine sockets, ready / metrics files, engine events
//     |-- API server i (i < N): `serve ... --api-server-index i`, listens on the port with
//     |     SO_REUSEPORT, binds its own sockets (out[.s<i>], in<e>[.s<i>]), EngineClient client_index i
//     |-- rank processes: each engine connects to every server's sockets (ipc/client_routing.h)
//
// SIGTERM / SIGINT here: every server drains (SIGUSR1; a second signal, a second SIGUSR1 that
// stops it at once) and says Shutdown to every engine, which exits once all N have; then exit 0.
// An API server that dies while serving: its clients' connections are gone with it; it is started
// again in its place (`--api-server-restarts k`): the new process tells the engines, which abort
// the dead one's requests, and serves once they answer. The other servers serve on meanwhile (the
// kernel gives new connections only to listening servers). A server that dies --max-rank-restarts
// times in a row before it serves (or with --max-rank-restarts 0, or once an engine is lost): the
// others drain, and the deployment stops with exit status 1.
// A rank that dies: this process is its launcher (rank_supervisor.h), as a single API server is:
// restarted with self-healing, else its engines lost; it appends what happens to its engines to
// the run folder's event log, which every server replays onto its EngineClient (engine_notices.h).
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>

#include "moeserve/cli/engine_notices.h"
#include "moeserve/cli/rank_restarts.h"
#include "moeserve/cli/rank_supervisor.h"
#include "moeserve/cli/serve_command.h"
#include "moeserve/cli/serve_processes.h"
#include "moeserve/core/error.h"
#include "moeserve/ipc/auth.h"
#include "moeserve/parallel/rendezvous.h"

namespace moeserve::cli {

namespace {

// This process's argv as it was given (/proc/self/cmdline), for the API server processes.
std::vector<std::string> own_argv() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> out;
    size_t start = 0;
    while (start < text.size()) {
        const size_t end = text.find('\0', start);
        out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
        if (end == std::string::npos) break;
        start = end + 1;
    }
    if (out.empty()) raise(ErrorCode::kIo, "cannot read /proc/self/cmdline to start the API servers");
    return out;
}

bool exists(const std::string& path) {
    std::error_code ec;
    return std::filesystem::exists(path, ec);
}

// Starts the API server processes and starts a dead one again in its place (see the top).
class ApiServers {
public:
    ApiServers(const Deployment& d, RankProcesses& children, const std::string& run_dir, int port,
               const EngineEventLogWriter& engine_events, Logger& logger)
        : d_(d),
          children_(children),
          run_dir_(run_dir),
          engine_events_(engine_events),
          base_(own_argv()),
          port_(port),
          logger_(logger),
          restarts_(d.max_rank_restarts),
          restarts_of_(static_cast<size_t>(d.api_servers), 0),
          seen_ready_(static_cast<size_t>(d.api_servers), false) {}

    void spawn_all() {
        std::lock_guard lock(mutex_);
        for (int i = 0; i < d_.api_servers; ++i) children_.spawn_api_server(argv(i), i);
    }
    bool all_ready() const {
        for (int i = 0; i < d_.api_servers; ++i)
            if (!exists(api_server_ready_file(run_dir_, i))) return false;
        return true;
    }
    // Every API server has served once: from now on a dead one is started again.
    void serving() { serving_ = true; }
    // The watcher thread's handler of an API server that exited (not during shutdown): started
    // again, or -1 -> its index in failed() (the deployment stops).
    void on_exit(const RankProcesses::Rank& r);
    int failed() const { return failed_.load(); }
    // The main loop's: logs restarted servers that serve again; once all do, the counts of
    // restarts in a row start over.
    void check_ready();

private:
    std::vector<std::string> argv(int i) const {  // with mutex_ held
        std::vector<std::string> a = base_;
        a.insert(a.end(), {"--api-server-index", std::to_string(i), "--api-server-run-dir", run_dir_,
                           "--api-server-port", std::to_string(port_)});
        const int restarts = restarts_of_[static_cast<size_t>(i)];
        if (restarts > 0) a.insert(a.end(), {"--api-server-restarts", std::to_string(restarts)});
        return a;
    }

    const Deployment& d_;
    RankProcesses& children_;
    const std::string run_dir_;
    const EngineEventLogWriter& engine_events_;
    const std::vector<std::string> base_;
    const int port_;
    Logger& logger_;
    RankRestarts restarts_;
    std::mutex mutex_;              // the two below: the watcher thread and the main loop
    std::vector<int> restarts_of_;  // cumulative, per index
    std::vector<bool> seen_ready_;  // its ready file, as check_ready() last saw it
    std::atomic<bool> serving_{false};
    std::atomic<int> failed_{-1};  // the first API server that exited and was not started again
};

void ApiServers::on_exit(const RankProcesses::Rank& r) {
    const int i = r.api_server;
    const std::string what = fmt::format("API server {} (process {}) {}", i, r.pid, describe_status(r.status));
    std::string why_not;
    if (!serving_) {
        why_not = "during startup";
    } else if (d_.max_rank_restarts == 0) {
        why_not = "--max-rank-restarts 0: not restarted";
    } else if (engine_events_.engine_lost()) {
        why_not = "an engine is lost too: not restarted";
    } else if (!restarts_.allow(i)) {
        why_not = fmt::format(
            "it was restarted {} times in a row without serving again, so it is not restarted "
            "(--max-rank-restarts {})",
            restarts_.limit(), restarts_.limit());
    }
    if (!why_not.empty()) {
        MOESERVE_LOG_E(logger_, "api", "%s; %s; stopping the deployment", what.c_str(), why_not.c_str());
        int none = -1;
        failed_.compare_exchange_strong(none, i);
        return;
    }
    std::lock_guard lock(mutex_);
    std::error_code ignored;
    std::filesystem::remove(api_server_ready_file(run_dir_, i), ignored);  // written again once it serves
    seen_ready_[static_cast<size_t>(i)] = false;
    ++restarts_of_[static_cast<size_t>(i)];
    const pid_t pid = children_.respawn(r.pid, argv(i));
    MOESERVE_LOG_W(logger_, "api", "%s; restarting it (%d of at most %d in a row): new process %d", what.c_str(),
                   restarts_.in_a_row(i), restarts_.limit(), pid);
}

void ApiServers::check_ready() {
    std::lock_guard lock(mutex_);
    bool all = true;
    for (int i = 0; i < d_.api_servers; ++i) {
        const bool ready = exists(api_server_ready_file(run_dir_, i));
        all = all && ready;
        if (ready && !seen_ready_[static_cast<size_t>(i)] && restarts_of_[static_cast<size_t>(i)] > 0)
            MOESERVE_LOG_I(logger_, "api", "API server %d serves again (restart %d)", i,
                           restarts_of_[static_cast<size_t>(i)]);
        seen_ready_[static_cast<size_t>(i)] = ready;
    }
    if (all) restarts_.serving_again();
}

}  // namespace

int run_api_servers(const ServeOptions& o, const Deployment& d) {
    Logger logger("api", parse_log_level(o.engine.log_level));
    SignalWatcher signals;  // first: blocks SIGINT/SIGTERM before any thread starts
    // Bound first, as one server does: a busy port or a bad --host fails before anything starts.
    serve::ReservedPort port(o.host, o.port);
    const std::string key = rank_plane_key(o, d);
    IpcDir run_dir;
    const std::unique_ptr<parallel::TcpStoreServer> store = start_rendezvous_store(d, logger);
    const int store_port = store ? store->port() : d.rpc_port;
    RankProcesses children(environment_with(ipc::kRankPlaneKeyEnv, key));
    EngineEventLogWriter engine_events(engine_event_log(run_dir.path()));
    ApiServers servers(d, children, run_dir.path(), port.port(), engine_events, logger);
    // The ranks' launcher; the API servers replay its notices onto their engines.
    RankSupervisor ranks(d, d.external_lb ? d.start : 0, d.external_lb ? d.local : d.sizes.dp, children, engine_events,
                         logger);
    std::atomic<bool> stopping{false};
    std::thread watcher;
    ScopeExit cleanup([&] {  // however this ends: nothing left running
        stopping = true;
        children.signal_api_servers(SIGUSR1);
        children.wait_or_kill(children.all_exited() ? 0 : 5);
        if (watcher.joinable()) watcher.join();
    });
    const auto started = std::chrono::steady_clock::now();
    spawn_local_ranks(children, o.engine, d, store_port, run_dir.path(), logger);
    servers.spawn_all();
    watcher = std::thread([&] {
        children.watch([&](const RankProcesses::Rank& r) {
            if (stopping) return;
            if (r.api_server >= 0) return servers.on_exit(r);
            try {
                ranks.on_exit(r);
            } catch (const Error& e) {  // the event log could not be written
                MOESERVE_LOG_E(logger, "api", "%s", e.what());
            }
        });
    });
    signals.start();
    MOESERVE_LOG_I(logger, "api", "%d API servers on %s://%s:%d (SO_REUSEPORT); waiting for them and the engines",
                   d.api_servers, o.tls.cert_file.empty() ? "http" : "https", o.host.c_str(), port.port());

    const auto deadline = started + std::chrono::duration<double>(o.engine_ready_timeout + 30);
    while (!servers.all_ready()) {
        if (signals.wait_beyond(0, std::chrono::milliseconds(100)) > 0) {
            MOESERVE_LOG_I(logger, "api", "signal %d before the API servers were ready: stopping", signals.last());
            return 0;
        }
        for (const auto& r : children.snapshot()) {
            if (!r.exited) continue;
            if (r.api_server >= 0)
                raise(ErrorCode::kUnavailable, "API server {} {} during startup (see its messages above)", r.api_server,
                      describe_status(r.status));
            raise(ErrorCode::kUnavailable, "rank {} {} during startup (see its messages above)", r.rank,
                  describe_status(r.status));
        }
        if (std::chrono::steady_clock::now() > deadline)
            raise(ErrorCode::kUnavailable, "the API servers were not ready within --engine-ready-timeout {} s",
                  o.engine_ready_timeout);
    }
    MOESERVE_LOG_I(logger, "api", "%d API servers ready in %.2f s; serving on %s://%s:%d", d.api_servers,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                   o.tls.cert_file.empty() ? "http" : "https", o.host.c_str(), port.port());

    servers.serving();
    ranks.serving();
    while (servers.failed() < 0 && signals.wait_beyond(0, std::chrono::milliseconds(100)) == 0) {
        servers.check_ready();
        ranks.check_health();
    }
    const bool failed = servers.failed() >= 0;
    if (failed) {
        MOESERVE_LOG_E(logger, "api", "API server %d is gone: the other API servers drain, then everything stops",
                       servers.failed());
    } else {
        MOESERVE_LOG_I(logger, "api", "signal %d: the API servers drain (up to %.0f s; a second signal stops them)",
                       signals.last(), o.drain_timeout);
    }
    stopping = true;
    children.signal_api_servers(SIGUSR1);
    const int seen = signals.count();
    const auto drain_end =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(o.drain_timeout + 15);  // + their shutdown
    bool second_sent = false;
    while (!children.api_servers_exited() && std::chrono::steady_clock::now() < drain_end) {
        if (!second_sent && signals.wait_beyond(seen, std::chrono::milliseconds(20)) > seen) {
            MOESERVE_LOG_W(logger, "api", "second signal: the API servers stop without waiting for their requests");
            children.signal_api_servers(SIGUSR1);
            second_sent = true;
        } else if (second_sent) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    // The engines leave once every API server said Shutdown; after a lost server they wait for
    // the one that never will, so they are stopped at once.
    children.wait_or_kill(failed ? 0.5 : 10);
    MOESERVE_LOG_I(logger, "api", "stopped");
    return failed ? 1 : 0;
}

}  // namespace moeserve::cli
