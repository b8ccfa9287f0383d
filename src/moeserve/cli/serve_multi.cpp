// `moeserve serve --api-server-count N` (N > 1, vLLM's flag; docs/parallelism.md, "Several API
// servers"): this process runs no HTTP server itself. It reserves the port, hosts the rendezvous
// store, starts the rank processes and N API server processes (this binary again, with the same
// flags plus hidden ones), and watches them all:
//
//   parent (this)    run folder $TMPDIR/moeserve-<pid>/: engine sockets, ready / metrics / dead files
//     |-- API server i (i < N): `serve ... --api-server-index i`, listens on the port with
//     |     SO_REUSEPORT, binds its own sockets (out[.s<i>], in<e>[.s<i>]), EngineClient client_index i
//     |-- rank processes: each engine connects to every server's sockets (ipc/client_routing.h)
//
// SIGTERM / SIGINT here: every server drains (SIGUSR1; a second signal, a second SIGUSR1 that
// stops it at once) and says Shutdown to every engine, which exits once all N have; then exit 0.
// An API server that dies: its clients' connections are gone with it, the others drain, and the
// deployment stops with exit status 1 (a supervisor restarts it whole, as after a dead rank).
// A rank that dies: the servers mark every engine dead (the engines-dead file), as one server does.
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>

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

}  // namespace

int run_api_servers(const ServeOptions& o, const Deployment& d) {
    Logger logger("api", parse_log_level(o.engine.log_level));
    SignalWatcher signals;  // first: blocks SIGINT/SIGTERM before any thread starts
    // Bound first, as one server does: a busy port or a bad --host fails before anything starts.
    serve::ReservedPort port(o.host, o.port);
    const std::string key = rank_plane_key(o, d);
    IpcDir run_dir;
    std::unique_ptr<parallel::TcpStoreServer> store;
    int store_port = d.rpc_port;
    if (d.world() > 1 && d.start == 0) {
        store = parallel::TcpStoreServer::start(d.address, d.rpc_port);
        store_port = store->port();
        MOESERVE_LOG_I(logger, "api", "rendezvous store on %s:%d for %d ranks (dp %d, tp %d, ep %d)", d.address.c_str(),
                       store_port, d.world(), d.sizes.dp, d.sizes.tp, d.sizes.ep);
    }
    RankProcesses children(environment_with(ipc::kRankPlaneKeyEnv, key));
    std::atomic<bool> stopping{false};
    std::atomic<int> failed_server{-1};  // the first API server that exited on its own
    std::thread watcher;
    ScopeExit cleanup([&] {  // however this ends: nothing left running
        stopping = true;
        children.signal_api_servers(SIGUSR1);
        children.wait_or_kill(children.all_exited() ? 0 : 5);
        if (watcher.joinable()) watcher.join();
    });
    const auto started = std::chrono::steady_clock::now();
    spawn_local_ranks(children, o.engine, d, store_port, run_dir.path(), logger);
    std::vector<std::string> base = own_argv();
    for (int i = 0; i < d.api_servers; ++i) {
        std::vector<std::string> argv = base;
        argv.insert(argv.end(), {"--api-server-index", std::to_string(i), "--api-server-run-dir", run_dir.path(),
                                 "--api-server-port", std::to_string(port.port())});
        children.spawn_api_server(argv, i);
    }
    watcher = std::thread([&] {
        children.watch([&](const RankProcesses::Rank& r) {
            if (stopping) return;
            if (r.api_server >= 0) {
                MOESERVE_LOG_E(logger, "api", "API server %d (process %d) %s; stopping the deployment", r.api_server,
                               r.pid, describe_status(r.status).c_str());
                int none = -1;
                failed_server.compare_exchange_strong(none, r.api_server);
                return;
            }
            const std::string reason =
                fmt::format("rank process {} (rank {}) {}", r.pid, r.rank, describe_status(r.status));
            MOESERVE_LOG_E(logger, "api", "%s", reason.c_str());
            try {
                write_text_file(engines_dead_file(run_dir.path()), reason);
            } catch (const Error& e) {
                MOESERVE_LOG_E(logger, "api", "%s", e.what());
            }
        });
    });
    signals.start();
    MOESERVE_LOG_I(logger, "api", "%d API servers on %s://%s:%d (SO_REUSEPORT); waiting for them and the engines",
                   d.api_servers, o.tls.cert_file.empty() ? "http" : "https", o.host.c_str(), port.port());

    const auto deadline = started + std::chrono::duration<double>(o.engine_ready_timeout + 30);
    const auto all_ready = [&] {
        for (int i = 0; i < d.api_servers; ++i)
            if (!exists(api_server_ready_file(run_dir.path(), i))) return false;
        return true;
    };
    while (!all_ready()) {
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

    while (failed_server.load() < 0 && signals.wait_beyond(0, std::chrono::milliseconds(100)) == 0) {
    }
    const bool failed = failed_server.load() >= 0;
    if (failed) {
        MOESERVE_LOG_E(logger, "api", "API server %d is gone: the other API servers drain, then everything stops",
                       failed_server.load());
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
