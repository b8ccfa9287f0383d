// Spawning rank helper processes with bounded waits, for the multi-process parallel tests.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace moeserve::testing {

// Starts argv[0] with argv; returns the pid (or -1).
inline pid_t spawn_process(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
    return pid;
}

struct ExitStatus {
    int code = -1;   // exit code, or -1
    int signal = 0;  // terminating signal, or 0
    bool timed_out = false;
};

// Waits for every pid until `deadline`; processes still alive then are SIGKILLed and reported
// as timed out. Never blocks past the deadline (+ the kill).
inline std::vector<ExitStatus> wait_all(const std::vector<pid_t>& pids,
                                        std::chrono::steady_clock::time_point deadline) {
    std::vector<ExitStatus> st(pids.size());
    std::vector<bool> done(pids.size(), false);
    size_t remaining = pids.size();
    while (remaining > 0) {
        for (size_t i = 0; i < pids.size(); ++i) {
            if (done[i]) continue;
            int status = 0;
            if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
                done[i] = true;
                --remaining;
                if (WIFEXITED(status)) st[i].code = WEXITSTATUS(status);
                if (WIFSIGNALED(status)) st[i].signal = WTERMSIG(status);
            }
        }
        if (remaining == 0) break;
        if (std::chrono::steady_clock::now() > deadline) {
            for (size_t i = 0; i < pids.size(); ++i) {
                if (done[i]) continue;
                kill(pids[i], SIGKILL);
                int status = 0;
                waitpid(pids[i], &status, 0);
                st[i].timed_out = true;
            }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return st;
}

}  // namespace moeserve::testing
