// Process plumbing of `moeserve serve` (serve_processes.h).
#include "moeserve/cli/serve_processes.h"

#include <fmt/format.h>
#include <sys/prctl.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "moeserve/core/error.h"
#include "moeserve/ipc/auth.h"

namespace moeserve::cli {

pid_t spawn_rank(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) raise(ErrorCode::kIo, "fork of the rank process failed: {}", std::strerror(errno));
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        signal(SIGINT, SIG_IGN);  // kept across exec
        signal(SIGTERM, SIG_IGN);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        // Nothing of the parent's but stdin/out/err: a rank restarted while the API server serves
        // would hold its HTTP connections (and listener) open, so their closes never reach the
        // clients.
        if (close_range(3, ~0U, 0) != 0) {
            for (int fd = 3; fd < 65536; ++fd) close(fd);
        }
        execve("/proc/self/exe", argv.data(), envp.data());
        _exit(127);
    }
    return pid;
}

std::vector<std::string> environment_with(const std::string& name, const std::string& value) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        if (std::string_view(*e).rfind(name + "=", 0) != 0) env.emplace_back(*e);
    }
    env.push_back(name + "=" + value);
    return env;
}

void write_text_file(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    const bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (f != nullptr && std::fclose(f) != 0) raise(ErrorCode::kIo, "cannot write {}: {}", tmp, std::strerror(errno));
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
        raise(ErrorCode::kIo, "cannot write {}: {}", path, std::strerror(errno));
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
    return "stopped";
}

std::string rank_plane_key(const ServeOptions& o, const Deployment& d) {
    if (!o.rank_plane_key_file.empty()) {
        std::string key = read_text_file(o.rank_plane_key_file);
        while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
        return key;
    }
    if (const char* key = std::getenv(ipc::kRankPlaneKeyEnv); key && *key) return key;
    if (d.local_sockets()) return ipc::random_rank_plane_key();  // the engine sockets are this node's
    raise(ErrorCode::kInvalidArgument,
          "ranks on several nodes need the same rank-plane key on every node: set {} "
          "(32+ random characters, e.g. from `head -c 32 /dev/urandom | xxd -p -c 64`) or --rank-plane-key-file",
          ipc::kRankPlaneKeyEnv);
}

int threads_per_rank(const EngineOptions& e, int local_ranks) {
    if (e.threads > 0) return e.threads;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, cores / std::max(1, local_ranks));
}

void spawn_local_ranks(RankProcesses& ranks, const EngineOptions& e, const Deployment& d, int store_port,
                       const std::string& ipc_dir, Logger& logger, bool rejoin) {
    const int threads = threads_per_rank(e, d.local * d.sizes.tp);
    for (int dp_rank = d.start; dp_rank < d.start + d.local; ++dp_rank) {
        for (int tp_rank = 0; tp_rank < d.sizes.tp; ++tp_rank) {
            const int rank = dp_rank * d.sizes.tp + tp_rank;
            std::vector<std::string> argv = rank_argv(e, d, rank, store_port, ipc_dir, threads);
            if (rejoin) argv.emplace_back("--rejoin");
            ranks.spawn(argv, rank);
        }
    }
    MOESERVE_LOG_I(logger, "api",
                   "started %d rank processes (DP ranks %d..%d, tp %d, ep %d, %d threads each%s); loading %s",
                   d.local * d.sizes.tp, d.start, d.start + d.local - 1, d.sizes.tp, d.sizes.ep, threads,
                   rejoin ? ", replacing the lost ones in their groups" : "", e.model.c_str());
}

std::unique_ptr<parallel::TcpStoreServer> start_rendezvous_store(const Deployment& d, Logger& logger) {
    if (d.world() <= 1 || d.start != 0) return nullptr;
    auto store = parallel::TcpStoreServer::start(d.address, d.rpc_port);
    MOESERVE_LOG_I(logger, "api", "rendezvous store on %s:%d for %d ranks (dp %d, tp %d, ep %d)", d.address.c_str(),
                   store->port(), d.world(), d.sizes.dp, d.sizes.tp, d.sizes.ep);
    return store;
}

}  // namespace moeserve::cli
