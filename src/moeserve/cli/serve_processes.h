// The processes `moeserve serve` starts and watches (docs/architecture.md, "Processes"): rank
// processes, and with --api-server-count > 1 the API server processes (serve_multi.cpp); the
// signals that stop them; the private folder of their ipc:// sockets.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moeserve/cli/serve_command.h"
#include "moeserve/core/error.h"
#include "moeserve/core/log.h"
#include "moeserve/parallel/rendezvous.h"

namespace moeserve::cli {

// fork + exec of this binary (a rank, or an API server of --api-server-count). The child ignores
// SIGINT and SIGTERM: a signal to the whole process group (Ctrl-C, systemd's stop) must not kill
// the ranks under the requests the head is still draining; the head stops them (Shutdown, then
// SIGKILL; an API server: SIGUSR1), and they die with it (PR_SET_PDEATHSIG). env: the child's
// whole environment (built before fork: no allocation in the child of a threaded parent).
pid_t spawn_rank(const std::vector<std::string>& args, const std::vector<std::string>& env);

// This process's environment with `name=value` set (replacing any earlier value).
std::vector<std::string> environment_with(const std::string& name, const std::string& value);

std::string describe_status(int status);

// Writes text to path through a temporary file and a rename, so a reader sees the old or the new
// text, never a part. Raises Error(kIo) naming the path.
void write_text_file(const std::string& path, const std::string& text);

// The deployment's rank-plane key (ipc/auth.h): --rank-plane-key-file, else the environment,
// else (all ranks on this node) a fresh one. Ranks on other nodes must be given the same key.
std::string rank_plane_key(const ServeOptions& o, const Deployment& d);

// Compute threads per rank: --threads, else the host's cores divided between its ranks.
int threads_per_rank(const EngineOptions& e, int local_ranks);

// The rank processes this node started (and, with --api-server-count > 1, the API server
// processes), and which of them have exited (reaped by watch(), which reaps every child).
class RankProcesses {
public:
    struct Rank {
        pid_t pid = 0;
        int rank = 0;  // the global rank; -1 for an API server
        bool exited = false;
        int status = 0;
        int api_server = -1;  // >= 0: this child is that API server
        std::vector<std::string> argv;
    };

    explicit RankProcesses(std::vector<std::string> env) : env_(std::move(env)) {}

    void spawn(const std::vector<std::string>& argv, int rank) {
        std::lock_guard lock(mutex_);
        ranks_.push_back({spawn_rank(argv, env_), rank, false, 0, -1, argv});
    }
    // Starts the exited child `pid` again with its arguments plus extra_flag (once); the new
    // process takes its entry. Returns the new pid.
    pid_t respawn(pid_t pid, const std::string& extra_flag) {
        return respawn_with(pid, [&](std::vector<std::string>& argv) {
            if (std::find(argv.begin(), argv.end(), extra_flag) == argv.end()) argv.push_back(extra_flag);
        });
    }
    // The same with the arguments `argv` instead.
    pid_t respawn(pid_t pid, std::vector<std::string> argv) {
        return respawn_with(pid, [&](std::vector<std::string>& old) { old = std::move(argv); });
    }
    void spawn_api_server(const std::vector<std::string>& argv, int api_server) {
        std::lock_guard lock(mutex_);
        ranks_.push_back({spawn_rank(argv, env_), -1, false, 0, api_server, argv});
    }
    // Sends sig to every API server still running.
    void signal_api_servers(int sig) const {
        std::lock_guard lock(mutex_);
        for (const auto& r : ranks_)
            if (r.api_server >= 0 && !r.exited) kill(r.pid, sig);
    }
    bool api_servers_exited() const {
        std::lock_guard lock(mutex_);
        for (const auto& r : ranks_)
            if (r.api_server >= 0 && !r.exited) return false;
        return true;
    }
    bool empty() const {
        std::lock_guard lock(mutex_);
        return ranks_.empty();
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
        for (const auto& r : ranks_)
            if (!r.exited) return false;
        return true;
    }
    void kill_all() const {
        std::lock_guard lock(mutex_);
        for (const auto& r : ranks_)
            if (!r.exited) kill(r.pid, SIGKILL);
    }
    // Kills every rank process (not the API servers).
    void kill_ranks() const {
        std::lock_guard lock(mutex_);
        for (const auto& r : ranks_)
            if (r.api_server < 0 && !r.exited) kill(r.pid, SIGKILL);
    }
    // Kills the rank processes of DP rank dp_rank (global ranks dp_rank * tp .. + tp - 1).
    void kill_group(int dp_rank, int tp) const {
        std::lock_guard lock(mutex_);
        for (const auto& r : ranks_)
            if (r.api_server < 0 && !r.exited && r.rank / tp == dp_rank) kill(r.pid, SIGKILL);
    }
    // Waits up to timeout_s for every rank to exit (someone runs watch()), then kills the rest.
    void wait_or_kill(double timeout_s) const {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        while (!all_exited() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        kill_all();
    }

private:
    template <typename Edit>
    pid_t respawn_with(pid_t pid, Edit&& edit_argv) {
        std::lock_guard lock(mutex_);
        for (auto& r : ranks_) {
            if (r.pid != pid || !r.exited) continue;
            edit_argv(r.argv);
            r.pid = spawn_rank(r.argv, env_);
            r.exited = false;
            r.status = 0;
            return r.pid;
        }
        raise(ErrorCode::kInternal, "no exited child process {} to start again", pid);
    }

    const std::vector<std::string> env_;
    mutable std::mutex mutex_;
    std::vector<Rank> ranks_;
};

// SIGINT / SIGTERM (an API server of --api-server-count: SIGUSR1, from its parent), taken by one
// thread (blocked in every other thread, before any starts).
class SignalWatcher {
public:
    explicit SignalWatcher(const std::vector<int>& signals = {SIGTERM, SIGINT}) {
        sigemptyset(&set_);
        for (const int s : signals) sigaddset(&set_, s);
        pthread_sigmask(SIG_BLOCK, &set_, nullptr);
        signal(SIGPIPE, SIG_IGN);
    }
    ~SignalWatcher() {
        quit_ = true;
        if (thread_.joinable()) thread_.join();
    }
    void start() {
        thread_ = std::thread([this] {
            while (!quit_) {
                const timespec tick{0, 100'000'000};
                const int sig = sigtimedwait(&set_, nullptr, &tick);
                if (sig <= 0) continue;
                std::lock_guard lock(mutex_);
                last_ = sig;
                ++count_;
                cv_.notify_all();
            }
        });
    }
    // Signals received so far (the first asks for a drain, a second for an immediate stop).
    int count() const {
        std::lock_guard lock(mutex_);
        return count_;
    }
    int last() const {
        std::lock_guard lock(mutex_);
        return last_;
    }
    // Waits until more than `seen` signals arrived, at most timeout; the count then.
    int wait_beyond(int seen, std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        cv_.wait_for(lock, timeout, [&] { return count_ > seen; });
        return count_;
    }

private:
    sigset_t set_;
    std::atomic<bool> quit_{false};
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    int count_ = 0, last_ = 0;
    std::thread thread_;
};

// Runs fn when the scope ends, however it ends (the cleanup of a failed startup).
class ScopeExit {
public:
    explicit ScopeExit(std::function<void()> fn) : fn_(std::move(fn)) {}
    ~ScopeExit() {
        if (fn_) fn_();
    }
    ScopeExit(const ScopeExit&) = delete;
    ScopeExit& operator=(const ScopeExit&) = delete;

private:
    std::function<void()> fn_;
};

// The private folder of the ipc:// sockets, /tmp/moeserve-<pid> (mode 0700: only this user can
// connect; with --api-server-count also the servers' ready and metrics files, serve_command.h).
// Removed when destroyed; folders of earlier servers that no longer run (killed, crashed) are
// removed when one is created.
class IpcDir {
public:
    IpcDir() {
        remove_stale();
        path_ = std::filesystem::temp_directory_path() / fmt::format("moeserve-{}", getpid());
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);  // a dead server's, whose pid we now have
        if (mkdir(path_.c_str(), 0700) != 0) {
            raise(ErrorCode::kIo, "cannot create the ipc folder {}: {}", path_.string(), std::strerror(errno));
        }
    }
    ~IpcDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    std::string path() const { return path_.string(); }

private:
    static void remove_stale() {
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
            const std::string name = entry.path().filename().string();
            if (name.rfind("moeserve-", 0) != 0 || name.size() == 9) continue;
            if (name.find_first_not_of("0123456789", 9) != std::string::npos) continue;
            struct stat st {};
            if (stat(entry.path().c_str(), &st) != 0 || st.st_uid != getuid()) continue;
            const long pid = std::strtol(name.c_str() + 9, nullptr, 10);
            if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
                std::filesystem::remove_all(entry.path(), ec);
            }
        }
    }
    std::filesystem::path path_;
};

// Starts this node's ranks: DP ranks [start, start + local) x every tp_rank. rejoin: they replace
// lost ranks of groups that formed without them (--rejoin).
void spawn_local_ranks(RankProcesses& ranks, const EngineOptions& e, const Deployment& d, int store_port,
                       const std::string& ipc_dir, Logger& logger, bool rejoin = false);

// The rendezvous store of the ranks' Gloo world, started where this node hosts it: more than one
// rank, and (external load balancing) only on DP rank 0's instance. Null where it hosts none.
std::unique_ptr<parallel::TcpStoreServer> start_rendezvous_store(const Deployment& d, Logger& logger);

}  // namespace moeserve::cli
