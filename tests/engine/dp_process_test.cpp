// The DP + EP step protocol across real processes: dp = 2 rank processes (Gloo over loopback,
// experts split across them) run the tiny Qwen3-MoE with requests spread unevenly and arriving
// mid-run, PD hybrid on and off; their greedy tokens equal the single-rank result. A rank that
// runs the other MoE exchange makes both fail with an error within the Gloo timeout, not hang.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <tuple>

#include "engine/engine_test_util.h"
#include "moeserve/model/registry.h"
#include "moeserve/parallel/rendezvous.h"
#include "parallel/process_util.h"
#include "test_support.h"

namespace moeserve::engine {
namespace {

using namespace testing;
using namespace std::chrono_literals;

struct ProcessRun {
    std::vector<moeserve::testing::ExitStatus> status;
    std::map<std::string, std::vector<int32_t>> tokens;
    std::vector<std::string> counters;
};

// requests[i] = (dp rank, round, prompt); max_tokens 6 each.
using Requests = std::vector<std::tuple<int, int, std::vector<int32_t>>>;
ProcessRun run_processes(const std::string& name, int dp, bool hybrid, const Requests& requests, int timeout_ms,
                         int flip_rank = -1) {
    const auto dir = moeserve::test::scratch_dir(name);
    const std::string workload = (dir / "workload.txt").string();
    {
        std::ofstream w(workload);
        for (size_t i = 0; i < requests.size(); ++i) {
            const auto& [rank, round, prompt] = requests[i];
            w << rank << ' ' << round << " r" << i << " 6 ";
            for (size_t k = 0; k < prompt.size(); ++k) w << (k ? "," : "") << prompt[k];
            w << '\n';
        }
    }
    auto server = parallel::TcpStoreServer::start("127.0.0.1", 0);
    std::vector<pid_t> pids;
    for (int r = 0; r < dp; ++r) {
        pids.push_back(moeserve::testing::spawn_process(
            {MOESERVE_DP_RANK_HELPER, "--rank", std::to_string(r), "--dp", std::to_string(dp), "--store",
             "127.0.0.1:" + std::to_string(server->port()), "--model", MOESERVE_QWEN3_TINY_DIR, "--workload", workload,
             "--out", (dir / ("out" + std::to_string(r) + ".txt")).string(), "--hybrid", hybrid ? "1" : "0",
             "--timeout-ms", std::to_string(timeout_ms), "--flip", r == flip_rank ? "1" : "0"}));
        EXPECT_GT(pids.back(), 0);
    }
    ProcessRun run;
    run.status = moeserve::testing::wait_all(pids, std::chrono::steady_clock::now() + 60s);
    for (int r = 0; r < dp; ++r) {
        std::ifstream in(dir / ("out" + std::to_string(r) + ".txt"));
        for (std::string line; std::getline(in, line);) {
            if (line.rfind("#counters", 0) == 0) {
                run.counters.push_back(line);
                continue;
            }
            const auto sp = line.find(' ');
            std::stringstream ts(line.substr(sp + 1));
            auto& t = run.tokens[line.substr(0, sp)];
            for (std::string x; std::getline(ts, x, ',');) t.push_back(std::stoi(x));
        }
    }
    return run;
}

Requests workload() {
    Rng rng(9);
    Requests out;
    const std::vector<std::pair<int, int>> where{{0, 0}, {1, 0}, {0, 2}, {0, 5}, {1, 9}};  // (rank, round)
    for (size_t i = 0; i < where.size(); ++i) {
        std::vector<int32_t> p;
        for (size_t k = 0; k < 5 + i * 6; ++k) p.push_back(static_cast<int32_t>(rng.next_u64() % 150000));
        out.emplace_back(where[i].first, where[i].second, p);
    }
    return out;
}

TEST(DpProcessTest, TwoGlooRanksEqualSingleRank) {
    const Requests reqs = workload();
    ThreadPool pool(1);
    auto model = model::load_model(MOESERVE_QWEN3_TINY_DIR, pool, model::LoadOptions{.max_model_len = 256});
    std::map<std::string, std::vector<int32_t>> expected;
    for (size_t i = 0; i < reqs.size(); ++i)
        expected["r" + std::to_string(i)] = greedy_alone(*model, std::get<2>(reqs[i]), 6);
    for (bool hybrid : {false, true}) {
        const ProcessRun run = run_processes(hybrid ? "dp_process_hybrid" : "dp_process_mixed", 2, hybrid, reqs, 20000);
        for (size_t r = 0; r < run.status.size(); ++r) {
            EXPECT_FALSE(run.status[r].timed_out) << "rank " << r << " hung";
            EXPECT_EQ(run.status[r].code, 0) << "rank " << r;
        }
        EXPECT_EQ(run.tokens, expected) << (hybrid ? "hybrid" : "mixed");
        for (const auto& c : run.counters) std::printf("[ figures  ] %s: %s\n", hybrid ? "hybrid" : "mixed", c.c_str());
    }
}

TEST(DpProcessTest, ExchangeMismatchFailsWithinTheTimeout) {
    const auto start = std::chrono::steady_clock::now();
    const ProcessRun run = run_processes("dp_process_mismatch", 2, true, workload(), 3000, 1);
    for (size_t r = 0; r < run.status.size(); ++r) {
        EXPECT_FALSE(run.status[r].timed_out) << "rank " << r << " hung";
        EXPECT_NE(run.status[r].code, 0) << "rank " << r << " should fail";
    }
    std::printf("[ figures  ] mismatch: exit codes %d %d after %.2f s\n", run.status[0].code, run.status[1].code,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace
}  // namespace moeserve::engine
